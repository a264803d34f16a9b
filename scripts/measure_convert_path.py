"""The convert path's counts (docs/BENCHMARKS.md "The convert path") for a source tree: modules crossed, returns upward
and family resolutions of `attnres convert <tiny llama> OUT --upcycle block`, by tests/conversion/test_convert_path.py's
`PathTrace`; `strict` also counts hf_attnres.utils and hf_attnres.folders.

    python3 scripts/measure_convert_path.py [ROOT] [rule|strict]

ROOT (default: this checkout) is the tree measured, with that test file in it (copy it into an older tree).
"""
import sys
import tempfile
from pathlib import Path


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    strict = len(sys.argv) > 2 and sys.argv[2] == "strict"
    sys.path.insert(0, str(root))
    import tests.conversion.test_convert_path as trace_test
    from tests.families.tiny import source_model

    if strict:
        trace_test.EXCLUDED = trace_test.MODEL
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source_model("llama").save_pretrained(tmp / "llama")
        trace_test.commands.convert(trace_test.parse_args(
            [str(tmp / "llama"), str(tmp / "warm"), "--upcycle", "block", "--no-progress"]))  # imports done: calls only
        trace = trace_test.convert_traced(tmp / "llama", tmp / "out")
    print(f"{root} ({'strict' if strict else 'rule'}): modules {len(trace.modules)}, returns upward "
          f"{len(trace.returns_up)}, family resolutions {trace.resolutions}\n  " + "\n  ".join(sorted(trace.modules)))


if __name__ == "__main__":
    main()
