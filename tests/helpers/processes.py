"""Child processes for the kill and signal tests: a writer started with ATTNRES_PAUSE_BEFORE_RENAME_S set pauses
before a rename and says so on stderr (`hf_attnres.folders.atomic_io.pause_before_rename`); the test signals it there.
The
pause is kept at one step only, the N-th rename whose pause line contains a marker (`pause_at/sitecustomize.py`), so
every step of a replace can be interrupted without waiting out the pauses before it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from hf_attnres.folders.atomic_io import PAUSE_ENV
from tests.helpers.train_fixtures import REPO


def attnres_command(name: str) -> list[str]:
    """`python -m hf_attnres NAME`, as a user runs a command."""
    return [sys.executable, "-m", "hf_attnres", name]


# Child processes load this folder's sitecustomize.py: it keeps only the chosen pause (see there)
PAUSE_FILTER = Path(__file__).parent / "pause_at"


def start_paused_writer(argv, marker: str = PAUSE_ENV, occurrence: int = 1) -> subprocess.Popen:
    """Start `argv` so that it pauses (long: it is signalled long before the pause ends) before its `occurrence`-th
    rename whose pause line contains `marker`, and before no other."""
    env = dict(os.environ, **{PAUSE_ENV: "120"}, PYTHONPATH=f"{PAUSE_FILTER}{os.pathsep}{REPO}", OMP_NUM_THREADS="1",
               ATTNRES_TEST_PAUSE_AT=marker, ATTNRES_TEST_PAUSE_OCCURRENCE=str(occurrence))
    return subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=REPO,
                            preexec_fn=sigint_at_default)


def sigint_at_default() -> None:
    """A child's `preexec_fn`: SIGINT at its default, as in a terminal. A suite started in the background (`cmd &`
    without job control) ignores it, and an ignored SIGINT is inherited, which would make the signal tests test
    nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_pause(process: subprocess.Popen, marker: str = PAUSE_ENV) -> str:
    """Read the child's stderr until a complete pause line containing `marker` (the child is then sleeping in that
    pause); returns the stderr read so far. Fails the test if the child ends first."""
    seen = b""
    while not any(marker in line and f"{PAUSE_ENV}: " in line and line.endswith("\n")  # after a progress bar too
                  for line in seen.decode(errors="replace").splitlines(keepends=True)):
        chunk = process.stderr.read1(4096)
        if not chunk:
            process.wait()
            pytest.fail(f"{process.args} ended before pausing at {marker!r}: {seen.decode(errors='replace')[-2000:]}")
        seen += chunk
    return seen.decode(errors="replace")


def signal_when_paused(argv, sig: int = signal.SIGKILL, marker: str = PAUSE_ENV,
                       occurrence: int = 1) -> tuple[subprocess.Popen, str]:
    """Start `argv`, send `sig` at its `occurrence`-th pause whose line contains `marker`, wait for it to end;
    returns the ended process (its returncode set) and all it wrote to stderr."""
    process = start_paused_writer(argv, marker, occurrence)
    seen = wait_for_pause(process, marker)
    process.send_signal(sig)
    rest = process.stderr.read()  # what it says on its way out (nothing after SIGKILL)
    process.wait()
    process.stderr.close()
    return process, seen + rest.decode(errors="replace")


def kill_when_paused(argv, marker: str = PAUSE_ENV, occurrence: int = 1) -> subprocess.Popen:
    """Start `argv`, SIGKILL it at its `occurrence`-th pause whose line contains `marker`."""
    return signal_when_paused(argv, signal.SIGKILL, marker, occurrence)[0]


def pause_line(target) -> str:
    """The start of the line a writer prints when it pauses before renaming `target` into place."""
    return f"{PAUSE_ENV}: {target} written"


def aside_pause_line(output) -> str:
    """The start of the line of `move_into_place`'s second pause, between its two renames: the old `output` has
    stepped aside as `.NAME.replaced-PID`, the new one is not in place yet."""
    output = Path(output)
    return f"{PAUSE_ENV}: {output.parent / f'.{output.name}.replaced-'}"


def dead_pid() -> int:
    """The id of a process that has just ended (what a killed writer's leftovers are named after)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def leftovers(folder, *kinds) -> list[str]:
    """The writers' hidden siblings in `folder` (`.NAME.partial-PID`, `.NAME.replaced-PID` by default)."""
    kinds = kinds or (".partial-", ".replaced-")
    return sorted(p.name for p in folder.iterdir() if any(kind in p.name for kind in kinds))


# A second process that holds an output's claim (`hf_attnres.folders.atomic_io.claim_output`): atomic_io loaded from its
# file alone (the standard library only), so it starts in a fraction of a second
_HOLDER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("atomic_io", sys.argv[1])
atomic_io = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atomic_io)
with atomic_io.claim_output(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@contextmanager
def output_held(output):
    """For the body, another live process holds the claim of `output`, as a second writer of it would."""
    import hf_attnres.folders.atomic_io

    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, hf_attnres.folders.atomic_io.__file__, str(output)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n", "the holder process could not claim the output"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
