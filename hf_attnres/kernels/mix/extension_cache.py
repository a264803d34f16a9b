"""Where a JIT-built C++ extension may be loaded from: a per-user cache that loads only what it verified.

`torch.utils.cpp_extension.load_inline` rebuilds only what is out of date and then imports whatever library lies in
its build folder, and it serialises builders with a `lock` file in that folder. Up to torch 2.13 that file is a
`FileBaton`: removed when a build ends, left behind by a killed builder, and every later load waits on a leftover
forever. From torch 2.14 it is a `filelock.FileLock` (an `flock` on the file): left behind after every build, killed
or successful, and never waited on once its holder is gone. So a library planted in a predictable folder would run as
the user, and under torch <= 2.13 one SIGKILL hangs every later CPU forward. Here:

- the folder is named by a key over everything that makes the build (the caller's: source, flags, compiler, torch
  version and installation, Python ABI, platform), so two environments never share or rewrite each other's build;
- the cache folders are the user's own and writable by nobody else: any other is refused, named, with the fix;
- a library is loaded only when this process built it (into a folder it emptied first) or when a manifest written
  after a successful build of the same key records its sha256 (checked right before the load);
- builders take an `flock` beside the folder (the kernel releases it when a builder dies), so holding it proves
  that a torch `lock` file in the folder is a leftover, never a live build's. The manifest is written only after a
  build succeeded, so a `lock` beside a verified build is what a finished torch >= 2.14 build leaves: removed
  silently. A `lock` with no manifest is a build that died: removed, with one warning, and the folder rebuilt (a
  torch <= 2.13 builder would otherwise wait on it forever). A `lock` beside a manifest that does not verify goes
  with the folder, which is rebuilt under the manifest's own warning.

Any refusal raises `CacheRefused`; the caller falls back to its eager path.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import stat
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

ROOT_ENV = "ATTNRES_EXTENSIONS_DIR"
MANIFEST = "manifest.json"
TORCH_LOCK = "lock"  # torch's build lock in the build folder (a FileBaton up to 2.13, a FileLock from 2.14)
FORMAT = 1  # of the manifest


class CacheRefused(RuntimeError):
    """The cache (a folder or a file in it) is not safe to load code from, or cannot be used here."""


def current_user() -> int:
    return os.geteuid()


def cache_folders() -> list[Path]:
    """The folders of the cache, outermost first, that must be the user's own: $ATTNRES_EXTENSIONS_DIR, or
    <XDG_CACHE_HOME or ~/.cache>/attnres and its torch_extensions (whoever controls a folder can swap what is in it)."""
    root = os.environ.get(ROOT_ENV)
    if root:
        return [Path(root).expanduser().absolute()]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser().absolute() / "attnres"
    return [base, base / "torch_extensions"]


def key_digest(parts: dict) -> str:
    """sha256 over the build's inputs (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def check_private(path: Path, follow: bool = True) -> None:
    """`path` is a folder of the user's own that nobody else may write into; else `CacheRefused` naming it."""
    info = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise CacheRefused(f"{path} is not a folder")
    if info.st_uid != current_user():
        raise CacheRefused(f"the cache folder {path} belongs to another user (uid {info.st_uid}); set {ROOT_ENV} to "
                           "a folder of your own")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheRefused(f"the cache folder {path} is writable by others (mode {stat.S_IMODE(info.st_mode):o}); run "
                           f"`chmod go-w {path}` or set {ROOT_ENV} to a folder of your own")


def private_folder(path: Path, follow: bool = True) -> Path:
    """Create `path` (mode 0700) if missing, then `check_private` it."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    check_private(path, follow)
    return path


def prepare_root() -> Path:
    """The cache's own folders, created where missing (their parents as usual), each checked; returns the innermost."""
    if os.name != "posix":
        raise CacheRefused("the kernel cache needs a POSIX system (file owners and locks)")
    folders = cache_folders()
    folders[0].parent.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        private_folder(folder)
    return folders[-1]


@contextmanager
def build_lock(path: Path):
    """An exclusive `flock` on `path` for the block (released by the kernel if this process dies)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("attnres: another process is building the C++ kernel in %s; waiting for it", path.parent)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def plain_file(path: Path) -> os.stat_result | None:
    """lstat of a regular file of the user's own that nobody else may write, else None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    mine = info.st_uid == current_user() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return info if stat.S_ISREG(info.st_mode) and mine else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified_library(folder: Path, key: str) -> Path | None:
    """The library the manifest in `folder` records for `key`, if its bytes still hash to the recorded sha256. None
    when there is no manifest; a manifest that does not verify warns (the folder is then rebuilt)."""
    manifest = folder / MANIFEST
    if not os.path.lexists(manifest):
        return None
    try:
        record = json.loads(manifest.read_text()) if plain_file(manifest) else None
        name = record["library"] if isinstance(record, dict) and record.get("key") == key else None
        library = folder / name if isinstance(name, str) and name == Path(name).name else None
        if library is not None and plain_file(library) and sha256_of(library) == record.get("sha256"):
            return library
    except (OSError, ValueError, KeyError):
        pass
    warnings.warn(f"attnres: the cached C++ kernel in {folder} does not match its build record; rebuilding it",
                  RuntimeWarning, stacklevel=4)
    return None


def import_library(library: Path) -> ModuleType:
    """Import an extension module from its file (its module name is the file's, as torch names it)."""
    spec = importlib.util.spec_from_file_location(library.name.split(".")[0], library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_manifest(folder: Path, key: str, library: Path) -> None:
    record = dict(format=FORMAT, key=key, library=library.name, sha256=sha256_of(library))

    # the manifest appears whole or not at all: written beside it (this process's name), synced, then renamed
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(record, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, folder / MANIFEST)
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()


def discard_torch_lock(folder: Path, interrupted: bool) -> None:
    """Remove torch's `lock` file from `folder` (the caller holds the build lock: nobody is building there). Only a
    lock that `interrupted` marks as a dead builder's warns; one beside a completed build is torch >= 2.14's normal
    leftover and goes silently."""
    baton = folder / TORCH_LOCK
    if not os.path.lexists(baton):
        return
    if interrupted:
        warnings.warn(f"attnres: removed a stale build lock {baton} (an earlier C++ kernel build was interrupted)",
                      RuntimeWarning, stacklevel=4)
    baton.unlink()


def load_or_build(prefix: str, parts: dict, build: Callable[[str, Path], ModuleType]) -> ModuleType:
    """The extension for `parts` (the build's inputs): loaded from a verified earlier build, else built by
    `build(name, folder)` into an emptied folder of the user's own, recorded, and returned."""
    key = key_digest(parts)
    name = f"{prefix}_{key[:16]}"
    root = prepare_root()
    folder = root / name
    with build_lock(root / f"{name}.lock"):
        if os.path.lexists(folder):
            check_private(folder, follow=False)
            recorded = os.path.lexists(folder / MANIFEST)  # written only once a build has succeeded
            library = verified_library(folder, key)
            if library is not None:
                discard_torch_lock(folder, interrupted=False)
                return import_library(library)
            # no manifest: the build that left a `lock` died; a manifest that failed verification has warned already
            discard_torch_lock(folder, interrupted=not recorded)
            shutil.rmtree(folder)  # an unverified build (interrupted, or not ours to trust): start from nothing
        private_folder(folder, follow=False)
        logger.info("attnres: building the C++ kernel %s (once per key: about a CPU minute)", folder)
        module = build(name, folder)
        library = Path(module.__file__)
        if library.parent != folder:
            raise CacheRefused(f"the built module {library} is not in its build folder {folder}")
        write_manifest(folder, key, library)
        discard_torch_lock(folder, interrupted=False)  # torch >= 2.14 leaves its lock after a successful build
        return module


__all__ = ["CacheRefused", "ROOT_ENV", "cache_folders", "load_or_build", "key_digest"]
