"""A run's checkpoints, for the three trainers (`attnres train`, `train-pipeline`, `train-interleaved`).

- Layout: `<output-dir>/checkpoints/step-0000000N/`, complete once `trainer_state.json` (the run record and the step,
  written last) is in it. What a trainer writes beside it is its own (`TrainingState.save`).
- Atomic save: every process writes into `.tmp-step-N/`, then the main process renames it to `step-N/` once
  everything is on disk. A process killed mid-write leaves only a `.tmp-*` folder, which is never chosen and is
  cleaned up at the next start (`remove_partial`); the previous checkpoint stays complete. A rename within one folder
  is atomic on POSIX file systems. A failed write (disk full) or an interrupt (Ctrl-C, SIGTERM) removes the build
  folder on the way out (`written_or_removed`, which the final model's save uses too).
- Pruning keeps the `keep` newest of the run's own line: only checkpoints at or below the step just saved, never a
  newer one (`check_run_state` keeps newer ones from being there).
- Which checkpoint a run continues from (`choose_checkpoint`): `--resume never|auto|DIR` (auto: the latest
  complete one); the trainer's own rule decides whether the checkpoint's record matches this run (`attnres train`:
  its recorded flags, `resume.py`; the pipeline trainers: a signature, `signature_rule`), and a mismatch is refused
  naming what differs; a start or a resume never prunes or replaces a newer state the folder's run holds.
- What differs per trainer is how the state is gathered and restored (accelerate, DDP, FSDP2 and DeepSpeed engines;
  DeepSpeed's pipeline engine; one file per interleaved pipeline rank): a `TrainingState`.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Protocol

from ..folders.atomic_io import move_into_place, recover_interrupted
from ..folders.checkpoint_files import CheckpointFileError, read_json_file
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from ..utils.safe_paths import settle_interrupted, write_failure
from . import SetupError
from .guard import NonFiniteError

STATE_FILE = "trainer_state.json"
STEP_DIR = re.compile(r"^step-(\d+)$")
# Fault injection for the kill test: seconds to sleep after the files are written, before the rename
PAUSE_ENV = "ATTNRES_CHECKPOINT_PAUSE_S"


class TrainingState(Protocol):
    """One trainer's share of a checkpoint on this process: model, optimizer, schedule and RNG state. `save` writes
    it into the (build) folder, `load` restores it, reading plain data only; `barrier` waits for every process."""

    is_main: bool

    def barrier(self) -> None: ...

    def save(self, folder: Path) -> None: ...

    def load(self, folder: Path) -> None: ...


class ResumeFileError(CheckpointFileError, SetupError):
    """A damaged checkpoint file found while resuming: scripts print its message alone."""


# --- names and listing ---------------------------------------------------------------------------------------------


def checkpoints_root(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoints"


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def checkpoint_step(folder: Path) -> int:
    """The step a `step-N` checkpoint folder is named after."""
    return int(STEP_DIR.match(Path(folder).name).group(1))


def complete_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first (a `.tmp-*` build folder or one without its state is not)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [d for d in root.iterdir() if STEP_DIR.match(d.name) and (d / STATE_FILE).is_file()]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def resolve_checkpoint(path: str | Path) -> Path:
    """A `--resume` folder: as given, or `step-N` naming the zero-padded `step-0000000N` beside it
    (`checkpoints/step-100` finds `checkpoints/step-00000100`). Raises ValueError naming the path when neither is a
    complete checkpoint."""
    path = Path(path)
    match = STEP_DIR.match(path.name)
    candidates = [path] + ([checkpoint_dir(path.parent, int(match.group(1)))] if match else [])
    for folder in candidates:
        if (folder / STATE_FILE).is_file():
            return folder
    existing = [d.name for d in complete_checkpoints(path.parent)]
    hint = f"; checkpoints there: {', '.join(existing)}" if existing else ""
    if path.is_dir():
        raise ValueError(f"--resume {path}: not a checkpoint (no {STATE_FILE}){hint}")
    raise ValueError(f"--resume {path}: no such checkpoint folder{hint}")


def read_state(folder: Path) -> dict:
    """A checkpoint's trainer_state.json: a JSON object, or CheckpointFileError naming the file."""
    return read_json_file(Path(folder) / STATE_FILE, "training state")


def checked_step(folder: Path, state: dict, limit) -> int:
    """The checkpoint's step: an integer in [0, `limit`] (the run's last step), the one its folder is named after."""
    step = state.get("step")
    match = STEP_DIR.match(Path(folder).name)
    valid = isinstance(step, int) and not isinstance(step, bool) and isinstance(limit, int) and 0 <= step <= limit
    if not valid or (match and int(match.group(1)) != step):
        expected = f" (its folder is {Path(folder).name})" if match else ""
        raise ResumeFileError(f"{Path(folder) / STATE_FILE}: step {step!r} is not an integer in [0, {limit}] "
                              f"matching the checkpoint{expected}: the file is damaged or was edited")
    return step


def remove_partial(root: Path) -> None:
    """Delete `.tmp-*` folders left by a killed run, and settle a checkpoint swap it left midway (main process only,
    before training)."""
    root = Path(root)
    if not root.is_dir():
        return
    for leftover in root.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for old in root.glob(".step-*.replaced-*"):  # `move_into_place` of a re-saved step: the old copy goes back or goes
        recover_interrupted(root / old.name[1:].rsplit(".replaced-", 1)[0])


def interrupted_message(output_dir, signal) -> str:
    """The one line of a run stopped by Ctrl-C or SIGTERM: where it can continue from."""
    latest = latest_checkpoint(checkpoints_root(output_dir)) if output_dir is not None else None
    where = (f"the last complete checkpoint is {latest} (step {read_state(latest)['step']}): rerun the same command "
             "to continue from it" if latest else "no checkpoint was written yet: rerunning starts over")
    return f"interrupted ({signal.name}): {where}"


# --- writing a run output atomically -------------------------------------------------------------------------------


class OutputWriteError(SetupError):
    """Writing a run output failed on the filesystem (disk full, no permission): commands print its message alone.
    The half-written folder is gone; the previous checkpoint or model stays as it was."""


def write_error(output: Path, error: BaseException) -> OutputWriteError | None:
    """One error naming the OS error and `output`, for a failed write; None for other errors. torch.save reports a
    short write without an errno ("unexpected pos"): on a filesystem with (nearly) no space left that is ENOSPC."""
    message = write_failure(output, error) if isinstance(error, Exception) else None
    if message is None and isinstance(error, RuntimeError) and "unexpected pos" in str(error):
        full = shutil.disk_usage(Path(output).parent).free < 64 * 2**20
        message = write_failure(output, OSError(errno.ENOSPC if full else errno.EIO, ""))
    return None if message is None else OutputWriteError(message)


def check_written_weights(files, output: Path) -> None:
    """The weights just written for `output` (a checkpoint, final/) must be finite before they take its name: a NaN
    weight stops the run (NonFiniteError, exit code 3) and the previous `output` stays as it was."""
    try:
        finite_weights.check_files(files)
    except NonFiniteWeightsError as error:
        raise NonFiniteError(f"{error}; {output} was not written (the previous one, if any, is kept)") from None


@contextmanager
def written_or_removed(folder: Path, output: Path):
    """Around the writing of `folder` (the build folder of `output`): on any failure or interrupt it is removed, and
    a filesystem error becomes one OutputWriteError naming it and `output`."""
    try:
        yield
    except BaseException as error:
        shutil.rmtree(folder, ignore_errors=True)
        settle_interrupted(output)  # caught mid-swap: the old copy that stepped aside goes back
        failure = write_error(output, error)
        if failure is None:
            raise
        raise failure from None


def _fsync_tree(folder: Path) -> None:
    """Flush every file so the rename never publishes data still in the page cache."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def checkpoint_due(step: int, every: int, last_step: int) -> bool:
    """Every `every` steps (0: none periodic) and at the last step, so a run can always be continued."""
    return (every > 0 and step % every == 0) or step == last_step


def save_checkpoint(root: Path, step: int, record: dict, trainer: TrainingState, keep: int) -> Path:
    """Collective: every process calls it. `trainer.save(tmp)` writes the process's share; `record` (the run record)
    goes into trainer_state.json with the step, last. Keeps the `keep` newest of this run's line."""
    root, final = Path(root), checkpoint_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if trainer.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    trainer.barrier()
    with written_or_removed(tmp, final) if trainer.is_main else nullcontext():
        trainer.save(tmp)
        trainer.barrier()
        if trainer.is_main:
            check_written_weights(sorted(tmp.glob("model*.safetensors")), final)
            (tmp / STATE_FILE).write_text(json.dumps(dict(record, step=step), indent=2))
            _fsync_tree(tmp)
            time.sleep(float(os.environ.get(PAUSE_ENV, "0")))
            # the same step saved again (a resume from an older checkpoint): the old copy steps aside, then goes
            move_into_place(tmp, final, replace=True)
    if trainer.is_main:  # this run's line of checkpoints only: a newer one (another run's) is never pruned
        for old in [d for d in complete_checkpoints(root) if checkpoint_step(d) <= step][:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    trainer.barrier()
    return final


# --- which checkpoint a run continues from -------------------------------------------------------------------------


def resume_folder(resume: str, output_dir: Path) -> Path | None:
    """The checkpoint `--resume` names (None: start fresh): 'never', 'auto' (the latest complete checkpoint in
    `output_dir`/checkpoints, if any) or a checkpoint folder; ValueError naming the path when there is none."""
    if resume == "never":
        return None
    if resume == "auto":
        return latest_checkpoint(checkpoints_root(output_dir))
    return resolve_checkpoint(resume)  # also accepts checkpoints/step-100 for step-00000100


def check_run_state(output_dir: Path, folder: Path | None) -> None:
    """Refuse a start (`folder` None) or a resume that would prune, overwrite or replace a newer state that the
    run in `output_dir` already holds: its checkpoints and final/ belong to the run that wrote them."""
    output_dir = Path(output_dir)
    found = complete_checkpoints(checkpoints_root(output_dir))
    held = ([f"checkpoints up to {found[-1].name}"] if found else []) + (
        ["final/"] if os.path.lexists(output_dir / "final") else [])
    if not held:
        return
    if folder is None:
        raise ValueError(f"--output-dir {output_dir} holds another run ({' and '.join(held)}): a new run there would "
                         "prune its checkpoints and replace its final/; continue it with --resume auto, or start the "
                         "new run in a new --output-dir")
    inside = Path(folder).resolve().parent == checkpoints_root(output_dir).resolve() and STEP_DIR.match(folder.name)
    if not inside:
        raise ValueError(f"--resume {folder}: a checkpoint of another folder, but --output-dir {output_dir} holds a "
                         f"run of its own ({' and '.join(held)}): resume into a new --output-dir")
    if found and checkpoint_step(folder) < checkpoint_step(found[-1]):
        raise ValueError(f"--resume {folder}: --output-dir {output_dir} holds the newer checkpoint {found[-1].name}, "
                         "which continuing from an older one would prune or overwrite: resume from the latest "
                         "(--resume auto), or move the newer checkpoints out of the folder first")


def choose_checkpoint(resume: str, output_dir: Path,
                      matches: Callable[[Path, dict], None]) -> tuple[Path | None, dict | None]:
    """(checkpoint folder, its trainer_state.json) that `--resume` continues from, or (None, None) to start fresh.
    `matches(folder, state)`, the trainer's rule, refuses a checkpoint of another run by raising (first: what differs
    from the recorded run is the answer to a changed command); then a start or resume that would prune or replace a
    newer state of the folder's run is refused (ValueError naming the folder)."""
    folder = resume_folder(resume, output_dir)
    state = None if folder is None else read_state(folder)
    if folder is not None:
        matches(folder, state)
    check_run_state(output_dir, folder)
    return folder, state


def signature_differences(saved: dict, now: dict, prefix: str = "") -> dict:
    """{key: (saved, now)} of the signature entries that differ, nested ones (the recipe) by their own keys."""
    found = {}
    for key, value in now.items():
        if isinstance(value, dict) and isinstance(saved.get(key), dict):
            found.update(signature_differences(saved[key], value, f"{prefix}{key}."))
        elif saved.get(key) != value:
            found[f"{prefix}{key}"] = (saved.get(key), value)
    return found


def check_signature(folder: Path, state: dict, signature: dict) -> None:
    """A checkpoint records its run's `signature` (what a resume must match): refused naming every entry that
    differs, with the saved and the current value."""
    saved = state.get("signature")
    mismatch = signature_differences(saved if isinstance(saved, dict) else {}, signature)
    if mismatch:
        raise ValueError(f"--resume {folder}: checkpoint was made with other settings {mismatch} (saved, now); use "
                         "another --output-dir")


def signature_rule(signature: dict, last_step: int,
                   check_files: Callable[[Path], None] | None = None) -> Callable[[Path, dict], None]:
    """`choose_checkpoint`'s rule for a trainer whose checkpoints record a run signature: the same signature (what
    differs is named), a step in [0, `last_step`] matching the folder, then the trainer's files intact."""
    def matches(folder: Path, state: dict) -> None:
        check_signature(folder, state, signature)
        checked_step(folder, state, last_step)
        if check_files is not None:
            check_files(folder)

    return matches


def resume_training(trainer: TrainingState, folder: Path | None, state: dict | None) -> int:
    """Restore `trainer` from the chosen checkpoint; the step to continue after (0: a fresh start). Training data is a
    pure function of the step, so the step is the data position too."""
    if folder is None:
        return 0
    trainer.load(folder)
    return state["step"]
