"""What a training run says about its outputs: where it writes what, and how big, before it starts (an estimate from
the model) and as each output is written (the files' size on disk), so a run's disk use is never a surprise (a
checkpoint holds the optimizer state too: about three times the final weights).

Lines go to stderr, beside the progress bars, from the main process only.
"""
from __future__ import annotations

import sys
from pathlib import Path

# AdamW keeps two fp32 moments per parameter: a checkpoint is the weights plus these
ADAM_MOMENT_BYTES = 2 * 4


def show_bytes(count: float) -> str:
    """A size for people: KiB, MiB or GiB, three significant figures."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{int(count)} B"


def folder_bytes(folder: Path) -> int:
    """The bytes of every file under `folder` (0 where it does not exist)."""
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def numel(tensor) -> int:
    """Elements of the whole tensor: a ZeRO-3 partitioned parameter holds none locally and records its size."""
    return getattr(tensor, "ds_numel", None) or tensor.numel()


def weight_bytes(model) -> int:
    """The weights' bytes as saved: each distinct parameter and buffer once (a tied head shares the embedding's)."""
    seen = {id(t): numel(t) * t.element_size() for t in [*model.parameters(), *model.buffers(recurse=True)]}
    return sum(seen.values())


def plan_lines(args, model, output_dir: Path) -> list[str]:
    """Before the first step: what the run will write, where, and about how big."""
    weights = weight_bytes(model)
    parameters = sum(numel(p) for p in model.parameters() if p.requires_grad)
    lines = []
    if args.no_final_model:
        lines.append("no final model (--no-final-model)")
    else:
        lines.append(f"final weights: {Path(output_dir) / 'final'} (about {show_bytes(weights)})")
    if args.checkpoints == "resumable":
        each = weights + parameters * ADAM_MOMENT_BYTES
        cadence = f"every {args.save_every} steps and at the end" if args.save_every else "at the end"
        lines.append(f"resumable checkpoints: {Path(output_dir) / 'checkpoints'}, {cadence}, the newest "
                     f"{args.keep_checkpoints} kept (about {show_bytes(each)} each: the weights plus the optimizer "
                     f"state; --checkpoints final-only keeps the final weights alone)")
    else:
        lines.append("no checkpoints (--checkpoints final-only: a stopped run starts over; --checkpoints resumable "
                     "keeps them, about 3x the weights each)")
    return lines


def say(message: str, enabled: bool = True) -> None:
    """One line to stderr, above the progress bars (tqdm.write keeps an open bar intact); stdout stays the command's
    result."""
    if enabled:
        from tqdm.auto import tqdm

        tqdm.write(message, file=sys.stderr)
