"""A training run's process group is ended by an exit hook, not left to interpreter shutdown, and a second run in
the same process reuses it (hf_attnres.training.process_group)."""
import subprocess
import sys

import pytest

SCRIPT = """
import atexit, sys
import torch.distributed as dist
from hf_attnres.training.process_group import start_process_group

calls = []
def start(backend="gloo"):
    calls.append(backend)
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)

destroy = dist.destroy_process_group
def recorded_destroy(*args, **kwargs):
    print("destroyed", flush=True)
    return destroy(*args, **kwargs)
dist.destroy_process_group = recorded_destroy

if sys.argv[2] == "someone-else":
    start()
print("started", start_process_group(start), flush=True)
print("started", start_process_group(start), flush=True)  # a second run in the same process
print("calls", len(calls), "alive", dist.is_initialized(), flush=True)
if sys.argv[3] == "refused":
    sys.exit("error: refused")
if sys.argv[3] == "error":
    raise RuntimeError("boom")
"""


def run(tmp_path, owner: str, ending: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "store"), owner, ending],
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr or ending == "error", result.stderr
    return result.stdout.splitlines()


@pytest.mark.parametrize("ending", ["return", "refused"])
def test_the_group_is_started_once_and_ended_at_exit(tmp_path, ending):
    assert run(tmp_path, "run", ending) == ["started True", "started False", "calls 1 alive True", "destroyed"]


def test_a_group_someone_else_started_is_reused_and_ended_at_exit(tmp_path):
    assert run(tmp_path, "someone-else", "return") == ["started False", "started False", "calls 1 alive True",
                                                       "destroyed"]


def test_an_uncaught_error_leaves_the_group(tmp_path):
    """Another rank may be inside a collective: destroying could hang where failing is the point."""
    assert run(tmp_path, "run", "error") == ["started True", "started False", "calls 1 alive True"]
