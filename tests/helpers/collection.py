"""The tests pytest collects: a declared link from something (a README command, an example) to the test that runs it
is checked against one collection, so a renamed or deleted test fails the link, rather than against the test files'
text."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_ID = r"tests/[\w/]+\.py::\w+"  # a test's pytest node id, its parameters left out


@functools.cache
def _collected(files: tuple[str, ...]) -> frozenset[str]:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                            cwd=REPO, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return frozenset(line.partition("[")[0] for line in result.stdout.splitlines() if "::" in line)


def missing_tests(test_ids) -> list[str]:
    """The node ids (parameters left out) among `test_ids` that pytest does not collect from their files."""
    test_ids = set(test_ids)
    return sorted(test_ids - _collected(tuple(sorted({test.partition("::")[0] for test in test_ids}))))
