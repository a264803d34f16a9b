"""The C++ kernel's cache (kernels/mix/extension_cache.py through cpu_fused.load_extension): what may be loaded and
run. A tiny stand-in extension (plain C, compiled in a fraction of a second) replaces torch's ~1-minute build, built
the way torch's `load_inline` treats its folder: a library already there is imported as up to date, and a `lock`
file there makes it wait (torch <= 2.13's FileBaton); as torch >= 2.14's FileLock does, it can leave its `lock`
behind after a successful build. One test builds the stand-in with torch's own JIT build (whatever lock this torch
leaves), one loads the real kernel from its verified cache entry.

Each test fails on a cache without that guard: a library planted in the build folder ran, the cache was keyed without
the torch installation, compiler or Python ABI, folders were created for anyone to read and were used whoever owned
them or could write them, a lock left by a killed build hung every later load, and the lock torch >= 2.14 leaves
after every successful build was reported as an interrupted build.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import warnings
from pathlib import Path

import pytest
import torch

from hf_attnres.kernels.mix import cpu_fused

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the stand-in extension")

STAND_IN = """
#include <Python.h>
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) { return PyModule_Create(&definition); }
"""
# What an attacker plants: its constructor runs as soon as the library is loaded (dlopen), before any init function
PLANTED = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
  FILE* f = fopen("%(marker)s", "a");
  if (f) { fputs("planted code ran\\n", f); fclose(f); }
}
"""


def compile_c(source: str, library: Path) -> Path:
    c_file = library.with_suffix(".c")
    c_file.write_text(source)
    include = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{include}", "-o", str(library), str(c_file)], check=True)
    c_file.unlink()
    return library


class StandIn:
    """torch's `load_inline` for these tests: counts builds, waits on no lock (a `lock` present would make torch <= 2.13
    wait forever: an error here) and imports a library already in the folder, as torch's no-op rebuild does. With
    `leaves_lock` its build leaves its `lock` behind, as torch >= 2.14's FileLock does after every build."""

    def __init__(self, tmp_path: Path):
        self.builds = 0
        self.marker = tmp_path / "planted-ran"
        self.leaves_lock = False

    def __call__(self, name, build_directory, **kwargs):
        folder = Path(build_directory)
        if (folder / "lock").exists():
            raise RuntimeError(f"torch would wait forever on {folder / 'lock'}")
        library = folder / f"{name}.so"
        if not library.exists():
            self.builds += 1
            compile_c(STAND_IN % dict(name=name), library)
        if self.leaves_lock:
            (folder / "lock").touch(mode=0o644)
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, library)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """The kernel's build replaced by the stand-in, its cache in tmp_path/ext, its name unique to this test."""
    import torch.utils.cpp_extension

    fake = StandIn(tmp_path)
    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", fake)
    monkeypatch.setenv("ATTNRES_EXTENSIONS_DIR", str(tmp_path / "ext"))
    source = cpu_fused.cpp_source() + f"// stand-in {tmp_path}\n"
    monkeypatch.setattr(cpu_fused, "cpp_source", lambda: source)
    monkeypatch.setitem(cpu_fused._state, "tried", False)
    monkeypatch.setitem(cpu_fused._state, "module", None)
    return fake


def load():
    """A fresh process's first use of the kernel."""
    cpu_fused._state.update(tried=False, module=None)
    return cpu_fused.load_extension()


def no_warning(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert not [str(w.message) for w in caught if "attnres" in str(w.message)]
    return result


@needs_cc
def test_a_verified_build_is_loaded_without_rebuilding(stand_in):
    assert no_warning(load) is not None and stand_in.builds == 1
    name, folder = cpu_fused.build_directory()
    record = json.loads((folder / "manifest.json").read_text())
    assert record["library"] == f"{name}.so" and len(record["sha256"]) == 64
    assert no_warning(load) is not None and stand_in.builds == 1  # the next process: loaded, not rebuilt


@needs_cc
def test_a_library_planted_in_the_build_folder_never_runs(stand_in):
    """The folder name is predictable: a library placed there before the first build is never loaded."""
    name, folder = cpu_fused.build_directory()
    folder.mkdir(parents=True, mode=0o700)
    compile_c(PLANTED % dict(marker=stand_in.marker), folder / f"{name}.so")
    module = load()
    assert not stand_in.marker.exists()
    assert module is not None and stand_in.builds == 1  # built here instead


@needs_cc
def test_a_library_swapped_after_a_verified_build_is_refused_and_rebuilt(stand_in):
    assert load() is not None
    name, folder = cpu_fused.build_directory()
    (folder / f"{name}.so").unlink()
    compile_c(PLANTED % dict(marker=stand_in.marker), folder / f"{name}.so")
    with pytest.warns(RuntimeWarning, match=f"kernel in {re.escape(str(folder))} does not match its build record"):
        module = load()
    assert not stand_in.marker.exists()
    assert module is not None and stand_in.builds == 2


@needs_cc
@pytest.mark.parametrize("where", ["ATTNRES_EXTENSIONS_DIR", "XDG_CACHE_HOME"])
def test_cache_folders_are_created_for_the_user_alone(stand_in, monkeypatch, tmp_path, where):
    if where == "XDG_CACHE_HOME":
        monkeypatch.delenv("ATTNRES_EXTENSIONS_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        created = [tmp_path / "cache" / "attnres", tmp_path / "cache" / "attnres" / "torch_extensions"]
    else:
        created = [tmp_path / "ext"]
    assert load() is not None
    _, folder = cpu_fused.build_directory()
    for path in [*created, folder]:
        assert path.is_dir() and path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077 == 0, path


@needs_cc
@pytest.mark.parametrize("which", ["cache", "build"])
def test_a_folder_of_another_user_is_refused(stand_in, monkeypatch, which):
    name, folder = cpu_fused.build_directory()
    folder.mkdir(parents=True, mode=0o700)
    if which == "cache":  # this process now runs as "another user": the cache root is not its own
        from hf_attnres.kernels.mix import extension_cache

        real = os.geteuid()
        monkeypatch.setattr(extension_cache, "current_user", lambda: real + 1, raising=False)
        refused = folder.parent
    elif os.geteuid() == 0:
        os.chown(folder, 4242, -1)  # the build folder handed to another user
        refused = folder
    else:
        pytest.skip("giving a folder to another user needs root")
    with pytest.warns(RuntimeWarning, match=f"not loaded: the cache folder {re.escape(str(refused))} belongs to "
                                            "another user.*ATTNRES_EXTENSIONS_DIR.*eager PyTorch path"):
        assert load() is None
    assert stand_in.builds == 0


@needs_cc
@pytest.mark.parametrize("which, mode", [("cache", 0o777), ("cache", 0o775), ("build", 0o770), ("build", 0o703)])
def test_a_folder_others_can_write_is_refused(stand_in, which, mode):
    name, folder = cpu_fused.build_directory()
    folder.mkdir(parents=True, mode=0o700)
    refused = folder.parent if which == "cache" else folder
    refused.chmod(mode)
    path = re.escape(str(refused))
    with pytest.warns(RuntimeWarning, match=f"the cache folder {path} is writable by others \\(mode {mode:o}\\).*"
                                            f"chmod go-w {path}.*eager PyTorch path"):
        assert load() is None
    assert stand_in.builds == 0


KILLED_BUILDER = """
import fcntl, os, signal, sys
folder, lock, name, torch_lock = sys.argv[1:]
os.makedirs(folder, mode=0o700)
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)  # the attnres build lock, held while building
baton = os.open(os.path.join(folder, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
if torch_lock == "FileLock":  # torch >= 2.14: an flock on the file, which stays; the library half written
    fcntl.flock(baton, fcntl.LOCK_EX)
    with open(os.path.join(folder, name + ".so"), "wb") as library:
        library.write(b"\\x7fELF")
# else torch <= 2.13's FileBaton: the file's existence is the lock, removed only when the build ends
os.kill(os.getpid(), signal.SIGKILL)  # killed mid-build
"""


@needs_cc
@pytest.mark.parametrize("torch_lock", ["FileBaton", "FileLock"])
def test_a_lock_left_by_a_killed_build_is_broken_with_one_warning(stand_in, tmp_path, torch_lock):
    """torch's `lock` file outlives a SIGKILLed build (torch <= 2.13 waits on it forever), and no manifest records a
    build; the attnres build lock is released by the kernel when its holder dies, so holding it proves the file
    stale."""
    name, folder = cpu_fused.build_directory()
    folder.parent.mkdir(mode=0o700)
    killed = subprocess.run([sys.executable, "-c", KILLED_BUILDER, str(folder), str(folder.parent / f"{name}.lock"),
                             name, torch_lock])
    assert killed.returncode == -signal.SIGKILL and (folder / "lock").exists()
    assert (folder / f"{name}.so").exists() == (torch_lock == "FileLock")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = load()
    messages = [str(w.message) for w in caught if "attnres" in str(w.message)]
    assert messages == [f"attnres: removed a stale build lock {folder / 'lock'} (an earlier C++ kernel build was "
                        "interrupted)"]
    assert module is not None and stand_in.builds == 1 and not (folder / "lock").exists()


@needs_cc
def test_the_lock_a_successful_build_leaves_is_removed_silently(stand_in):
    """torch >= 2.14 leaves its `lock` after every successful build: no warning, neither right after the build nor in
    a later load that finds it beside the verified build (as a cache that kept it left the folder), and no rebuild."""
    stand_in.leaves_lock = True
    assert no_warning(load) is not None and stand_in.builds == 1
    name, folder = cpu_fused.build_directory()
    assert (folder / "manifest.json").exists() and not (folder / "lock").exists()
    (folder / "lock").touch(mode=0o644)  # beside the complete, recorded build
    module = no_warning(load)
    assert module is not None and Path(module.__file__) == folder / f"{name}.so" and stand_in.builds == 1
    assert not (folder / "lock").exists()


@needs_cc
def test_a_lock_beside_a_build_that_does_not_verify_warns_only_the_mismatch(stand_in):
    """A `lock` beside a recorded build whose library no longer matches: the build had finished (its manifest is
    written only then), so the one warning is the mismatch, and the folder is rebuilt."""
    stand_in.leaves_lock = True
    assert load() is not None
    name, folder = cpu_fused.build_directory()
    (folder / "lock").touch(mode=0o644)
    (folder / f"{name}.so").unlink()  # not rewritten in place: this process has it mapped
    (folder / f"{name}.so").write_bytes(b"\x7fELF")  # a library that does not hash to the record
    stand_in.leaves_lock = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = load()
    messages = [str(w.message) for w in caught if "attnres" in str(w.message)]
    assert messages == [f"attnres: the cached C++ kernel in {folder} does not match its build record; rebuilding it"]
    assert module is not None and stand_in.builds == 2 and not (folder / "lock").exists()


class TorchBuild(StandIn):
    """The stand-in built by torch's own JIT build (`cpp_extension.load`: its lock, its ninja build, its import),
    recording whether that build left its `lock` file behind."""

    def __init__(self, tmp_path: Path):
        super().__init__(tmp_path)
        self.left_lock = None

    def __call__(self, name, build_directory, **kwargs):
        from torch.utils.cpp_extension import load as torch_load

        folder = Path(build_directory)
        source = folder.parent / f"{name}.cpp"
        source.write_text(STAND_IN % dict(name=name))
        self.builds += 1
        try:
            module = torch_load(name, sources=[str(source)], build_directory=str(folder), verbose=False)
        finally:
            source.unlink()
        self.left_lock = (folder / "lock").exists()
        return module


@needs_cc
@pytest.mark.skipif(shutil.which("ninja") is None, reason="torch's JIT build needs ninja")
def test_the_lock_a_real_torch_build_leaves_is_removed_silently(stand_in, monkeypatch, tmp_path):
    """torch's own build, whatever its lock: a FileLock (torch >= 2.14) leaves `lock` beside the built library, a
    FileBaton (torch <= 2.13) removes it. Either way no warning, no `lock` left in the cache, and a fresh load comes
    from the manifest without a build."""
    import torch.utils.cpp_extension

    built = TorchBuild(tmp_path)
    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", built)
    assert no_warning(load) is not None and built.builds == 1
    assert built.left_lock == hasattr(torch.utils.cpp_extension, "FileLock"), "torch's lock is not what it was read as"
    name, folder = cpu_fused.build_directory()
    assert not (folder / "lock").exists()
    (folder / "lock").touch(mode=0o644)  # as a torch >= 2.14 build leaves it, here under any torch
    module = no_warning(load)
    assert module is not None and Path(module.__file__).parent == folder and built.builds == 1
    assert not (folder / "lock").exists()


@needs_cc
def test_a_live_build_is_waited_for_not_broken(stand_in):
    """Another process holding the build lock is building: its `lock` file stays and this process waits."""
    name, folder = cpu_fused.build_directory()
    folder.mkdir(parents=True, mode=0o700)
    (folder / "lock").touch()
    fd = os.open(folder.parent / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # flock locks belong to the open file: a second open in this process conflicts
    result = {}
    waiter = threading.Thread(target=lambda: result.update(module=load()))
    try:
        waiter.start()
        waiter.join(timeout=1.5)
        assert waiter.is_alive() and (folder / "lock").exists() and stand_in.builds == 0
        (folder / "lock").unlink()  # the other build ends
    finally:
        os.close(fd)
    waiter.join(timeout=60)
    assert result["module"] is not None and stand_in.builds == 1


def test_the_build_key_covers_what_makes_the_build(monkeypatch):
    """Another torch installation (a second virtual environment), torch version, compiler, Python ABI, flag or CPU
    gets its own build: none loads another's module, none rewrites another's build."""
    name = cpu_fused.build_directory()[0]
    get_config_var = sysconfig.get_config_var
    changed_source = cpu_fused.cpp_source() + "//\n"
    changes = {
        "torch installation": lambda patch: patch.setattr(torch, "__file__", "/venvs/other/torch/__init__.py"),
        "torch version": lambda patch: patch.setattr(torch, "__version__", "9.9.9"),
        "compiler": lambda patch: patch.setenv("CXX", "clang++"),
        "python ABI": lambda patch: patch.setattr(sysconfig, "get_config_var", lambda key: (
            ".cpython-311d-x86_64-linux-gnu.so" if key == "EXT_SUFFIX" else get_config_var(key))),
        "flags": lambda patch: patch.setattr(cpu_fused, "build_flags", lambda: ["-O2"]),
        "cpu": lambda patch: patch.setattr(cpu_fused, "cpu_flags", lambda: "flags : fpu"),
        "source": lambda patch: patch.setattr(cpu_fused, "cpp_source", lambda: changed_source),
    }
    for what, change in changes.items():
        with monkeypatch.context() as patch:  # each change undone before the next
            change(patch)
            assert cpu_fused.build_directory()[0] != name, what
    assert cpu_fused.build_directory()[0] == name


def test_the_real_kernel_loads_from_its_verified_cache(monkeypatch):
    """The real load path, once: the kernel built (or found) in the user's cache comes back in a fresh load from its
    manifest alone (no build), its library's sha256 the recorded one, and it computes."""
    if cpu_fused.load_extension() is None:
        pytest.fail("the fused CPU kernel did not build here (tests/kernels/test_mix_cpu_fused.py says why)")
    import hashlib

    import torch.utils.cpp_extension

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although a verified build is cached")

    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", no_build)
    monkeypatch.setitem(cpu_fused._state, "tried", False)
    monkeypatch.setitem(cpu_fused._state, "module", None)
    module = no_warning(cpu_fused.load_extension)
    name, folder = cpu_fused.build_directory()
    record = json.loads((folder / "manifest.json").read_text())
    assert Path(module.__file__) == folder / record["library"]
    assert hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest() == record["sha256"]
    sources = [torch.randn(2, 3, 8) for _ in range(3)]
    query, norm = torch.randn(8), torch.ones(8)
    out = module.mix_forward(sources, query, norm, 1e-6, None, 1e-6, False)[0]
    from hf_attnres.kernels.mix import attn_res_naive

    torch.testing.assert_close(out, attn_res_naive(sources, query, norm, 1e-6), rtol=1e-5, atol=1e-5)
