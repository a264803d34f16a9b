"""Started with the kill tests' child processes (tests/helpers/processes.py puts this folder first on PYTHONPATH when a
test stops a writer at a later step): the writer then pauses only before the rename whose pause line contains
ATTNRES_TEST_PAUSE_AT, the ATTNRES_TEST_PAUSE_OCCURRENCE-th time, instead of before every rename (each earlier pause
would last the whole pause)."""
import os

_MARKER = os.environ.get("ATTNRES_TEST_PAUSE_AT")

if _MARKER:
    from hf_attnres.folders import atomic_io

    _pause = atomic_io.pause_before_rename
    _wanted = int(os.environ.get("ATTNRES_TEST_PAUSE_OCCURRENCE", "1"))
    _seen = 0

    def _pause_at_the_chosen_step(target) -> None:
        global _seen
        if _MARKER in f"{atomic_io.PAUSE_ENV}: {target} written":
            _seen += 1
            if _seen == _wanted:
                _pause(target)

    atomic_io.pause_before_rename = _pause_at_the_chosen_step
