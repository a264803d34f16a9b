"""Shipped folder sizes (BENCHMARKS.md "Shipped folder sizes"): the bytes of every generated code file of each family's
saved folder, the median wall time of `import attnres` in a fresh interpreter, and the line counts of attnres/core.

    PYTHONPATH=$PWD python3 scripts/measure_shipped.py
"""
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def folder_sizes() -> None:
    import attnres  # noqa: F401
    from attnres.families.registry import SUPPORTED
    from tests.data.unchanged.record import build, config_fields

    with tempfile.TemporaryDirectory() as tmp:
        for family in SUPPORTED:
            folder = Path(tmp) / family
            build(family, config_fields(family, "block")).save_pretrained(folder)
            files = {p.name: p.stat().st_size for p in sorted(folder.glob("*.py"))}
            print(f"{family}: {sum(files.values())} bytes of code: "
                  + ", ".join(f"{name} {size}" for name, size in files.items()))


def import_time(runs: int = 5) -> None:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import attnres"], check=True, cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - start)
    print(f"import attnres: median {statistics.median(times):.2f} s of {runs} ({', '.join(f'{t:.2f}' for t in times)})")


def core_lines() -> None:
    files = {p.name: len(p.read_text().splitlines()) for p in sorted((ROOT / "attnres" / "core").glob("*.py"))}
    print(f"attnres/core: {len(files)} files, {sum(files.values())} lines: "
          + ", ".join(f"{name} {n}" for name, n in files.items()))


if __name__ == "__main__":
    folder_sizes()
    import_time()
    core_lines()
