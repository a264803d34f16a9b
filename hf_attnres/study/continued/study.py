"""The continued-training study: prepare the corpus with the source's tokenizer, measure the zero lines (the source
model and each upcycled mode at step 0 on the whole held-out split), train the grid's runs resumably (the study's
runner: result.json last, a rerun skips finished runs, tuned seeds start once their arm's sweep is done), then report.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from ...families.upcycle import BLOCK_SIZE_MODES
from ...folders.atomic_io import write_json_atomic
from ..runner import RESULT_FILE, StudyError, exit_code, run_grid, single_key
from ..runner import ensure_data as runner_ensure_data
from .config import ContinuedGrid, load_continued
from .train import arm_model, heldout, train_run

ZERO_DIR = "zero"
GRID_RECORD = "grid.json"  # the settings the output folder's runs were made with


def grid_settings(cg: ContinuedGrid) -> dict:
    """What decides a finished run or the report (not the groups: they only add or select runs)."""
    g = cg.grid
    return json.loads(json.dumps(dict(source=cg.source, data=g.data, model=g.model, train=g.train, arms=g.arms,
                                      lm_eval=cg.lm_eval)))


def differing(old, new, prefix: str = "") -> list[str]:
    """The dotted names of the fields whose values differ between two settings dicts."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [prefix or "(the whole grid)"]
    names = []
    for key in sorted(set(old) | set(new), key=str):
        names += differing(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
    return names


def check_same_grid(cg: ContinuedGrid, out: Path, force: bool) -> None:
    """StudyError naming the differing fields when `out` holds runs made with other settings (an edited grid would
    replace them and the summary); with `force` the new settings are taken (`record_grid` writes them)."""
    path, settings = out / GRID_RECORD, grid_settings(cg)
    if path.is_file() and not force:
        try:
            old = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            old = None
        fields = differing(old, settings) if isinstance(old, dict) else ["(unreadable)"]
        if fields:
            shown = ", ".join(fields[:6]) + (f" and {len(fields) - 6} more" if len(fields) > 6 else "")
            raise StudyError(f"--output-dir {out} holds runs of other settings ({path}): {shown} differ; rerun with "
                             "--force to train the edited grid there (runs made with the old settings are redone and "
                             "the summary replaced), or give another --output-dir")


def record_grid(cg: ContinuedGrid, out: Path) -> None:
    """The settings this folder's runs are made with (before the first run trains)."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / GRID_RECORD, grid_settings(cg))


def load(grid_file: Path, resolve_source=None) -> ContinuedGrid:
    try:
        return load_continued(grid_file, resolve_source)
    except ValueError as error:
        raise StudyError(str(error)) from None


def check_runnable(cg: ContinuedGrid) -> None:
    """What only training needs: the grid's device (a GPU grid may be listed or reported on a CPU machine)."""
    from .config import check_device

    def fail(message):
        raise StudyError(f"{cg.grid.source}: {message}")

    check_device(cg.continued, fail)


def ensure_data(cg: ContinuedGrid) -> dict:
    """The corpus prepared with the source's tokenizer (the study's `ensure_data`, `--tokenizer <source>`), once."""
    prepare = ["--tokenizer", str(cg.folder), *cg.grid.data.get("prepare", [])]
    return runner_ensure_data(replace(cg.grid, data=dict(cg.grid.data, prepare=prepare)))


def zero_modes(cg: ContinuedGrid) -> dict:
    """{name: (mode, block size)} of the step-0 models the grid's arms start from (a frozen arm shares its mode's)."""
    groups = cg.grid.groups
    arms = dict.fromkeys(groups.get("lr_sweep", {}).get("arms", []) + groups.get("tuned", {}).get("arms", []))
    starts = {(k.mode, k.block_size) for k in (cg.grid.arm_key(a, 1.0, 0) for a in arms)}
    return {(f"{mode}-S{size}" if mode in BLOCK_SIZE_MODES else mode): (mode, size) for mode, size in sorted(starts)}


def zero_lines(cg: ContinuedGrid, out: Path, threads: int = 1) -> dict:
    """{mode: held-out metrics at step 0}: the pretrained model's own line (standard), and each upcycled mode's, which
    must equal it within the upcycling tolerance (the report shows both). Cached under <out>/zero/."""
    import torch

    from ...conversion.upcycle_check import compare
    from ...training.data import load_prepared

    torch.set_num_threads(threads)
    lines, source = {}, None
    for name, (mode, size) in zero_modes(cg).items():
        path = out / ZERO_DIR / f"{name}.json"
        spec = dict(source=cg.source, data=cg.grid.data["dir"], block_size=size, continued=cg.grid.train["continued"])
        cached = json.loads(path.read_text()) if path.is_file() else None
        if cached is not None and cached.get("spec") == spec:
            lines[name] = cached
            continue
        model = arm_model(cg, mode, size).eval()
        record = dict(spec=spec, mode=mode, block_size=size, **heldout(cg, model, Path(cg.grid.data["dir"]), name))
        if mode != "standard":  # the upcycling check on the first held-out sequences: logits within the tolerance
            source = source or arm_model(cg, "standard", 0).eval()
            _, val_set, _ = load_prepared(Path(cg.grid.data["dir"]))
            with torch.no_grad():
                ids = val_set[: min(2, len(val_set))]["input_ids"].to(cg.continued["device"])
                record["upcycle_check"] = compare(source, model, ids)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)
        lines[name] = record
        print(f"zero line {name}: held-out loss {record['loss']:.4f}, bpb {record['bpb']:.4f}", flush=True)
    return lines


def runner(cg: ContinuedGrid):
    return lambda grid, key, out, meta, threads: train_run(cg, key, out, meta, threads)


def run_continued(grid_file: Path, output_dir: Path | None = None, report_dir: Path | None = None, *,
                  threads: int = 1, report_only: bool = False, dry_run: bool = False, note: str = "",
                  command: str = "", resolve_source=None, force: bool = False) -> int:
    """The whole command: data, zero lines, the grid's missing runs, lm-eval, the report. The exit code."""
    from ..runner import grid_runs
    from .report import write_report

    if threads < 1:
        raise StudyError(f"--threads must be >= 1, got {threads}")
    cg = load(grid_file, resolve_source)
    out = output_dir or Path("runs") / f"study-{cg.grid.name}"
    started = time.time()
    if dry_run:
        keys, done = grid_runs(cg.grid, out)
        for key in keys:
            print(f"{'done ' if key.id in done else 'to do'}  {key.id}  ({out / 'runs' / key.id / RESULT_FILE})")
        return 0
    if not report_only:
        check_runnable(cg)
    check_same_grid(cg, out, force)
    ensure_data(cg)
    if not report_only:
        record_grid(cg, out)
    zero = zero_lines(cg, out, threads)
    errors = []
    if not report_only:
        _, errors = run_grid(cg.grid, out, threads=threads, runner=runner(cg))
    path = write_report(cg, out, report_dir or out, zero, started=started, note=note, command=command,
                        threads=threads, evaluate=not report_only)
    print(f"wrote {path}")
    return exit_code(errors)


def run_one(grid_file: Path, output_dir: Path | None, arm: str, lr: float, seed: int, threads: int = 1,
            resolve_source=None, force: bool = False) -> int:
    """Train one arm at one LR and seed, as the grid's own run (same id and record: a grid rerun skips it)."""
    cg = load(grid_file, resolve_source)
    key = single_key(cg.grid, arm, lr, seed, None)
    out = output_dir or Path("runs") / f"study-{cg.grid.name}"
    check_runnable(cg)
    check_same_grid(cg, out, force)
    ensure_data(cg)
    record_grid(cg, out)
    records, errors = run_grid(cg.grid, out, threads=threads, only=[key], runner=runner(cg))
    if errors:
        print("error:", *errors, file=sys.stderr)
        return 1
    record = records[0]
    print(f"{key.id}: held-out loss {record['heldout_loss']:.4f}, bpb {record['heldout_bpb']:.4f} (whole split, "
          f"{record['heldout_sequences']} sequences); record {out / 'runs' / key.id / RESULT_FILE}")
    return 0
