"""The resume rule: a resume continues exactly the recorded run, or is refused.

The first segment of a run records its settings in every checkpoint's trainer_state.json: the flags of
`args.RUN_SETTINGS` (data, model, optimizer, schedule, batch plan, seed, precision, DeepSpeed), and what they
resolved to (the data's fingerprint, a digest of the model config, the process count). A later segment (`--resume`)
- takes the recorded value of every such flag it leaves out;
- is refused, with one message naming every conflicting flag and both values, when a flag it gives differs (files
  and folders by their content: --data by its fingerprint, --config / --init-from by the model config they give,
  --deepspeed by its JSON; a moved or copied one is the same);
- in particular a larger or smaller --max-steps is refused: the warmup + cosine schedule was built for the recorded
  total, so a longer one would make the learning rate jump and a shorter one end a run midway through its schedule.
  To train further, start a new --output-dir with --init-from <run>/final (a fresh optimizer and schedule).
A run never outlives or overwrites a newer state in its --output-dir (`check_run_state`): a fresh start
(`--resume never`, or `auto` with no checkpoint) into a folder that holds another run's checkpoints or final/ is
refused (its pruning would delete the newer checkpoints, its final/ replace theirs), and so is a resume from a
checkpoint older than the folder's latest or from another folder's checkpoint into a folder with a run of its own.
The checkpoint's step is checked (an integer in [0, recorded --max-steps] matching its folder name), and the state
keeps one record per segment (start and end step, command line, start time, data fingerprint): the provenance
training_info.json copies them.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path

from ..folders.checkpoint_files import read_json_file
from .args import PATH_SETTINGS, RUN_SETTINGS, fill_settings, given_settings
from .fsdp2 import fsdp_launch
from .recipe import Recipe
from .state import (
    STATE_FILE,
    STEP_DIR,
    ResumeFileError,
    checkpoint_step,
    complete_checkpoints,
    latest_checkpoint,
    resolve_checkpoint,
)


def resume_folder(args) -> Path | None:
    """The checkpoint `--resume` names (None: start fresh); ValueError naming the path when there is none."""
    if args.resume == "never":
        return None
    if args.resume == "auto":
        return latest_checkpoint(Path(args.output_dir) / "checkpoints")
    return resolve_checkpoint(args.resume)  # also accepts checkpoints/step-100 for step-00000100


def check_run_state(output_dir: Path, folder: Path | None) -> None:
    """Refuse a start (`folder` None) or a resume that would prune, overwrite or replace a newer state that the
    run in `output_dir` already holds: its checkpoints and final/ belong to the run that wrote them."""
    output_dir = Path(output_dir)
    found = complete_checkpoints(output_dir / "checkpoints")
    held = ([f"checkpoints up to {found[-1].name}"] if found else []) + (
        ["final/"] if os.path.lexists(output_dir / "final") else [])
    if not held:
        return
    if folder is None:
        raise ValueError(f"--output-dir {output_dir} holds another run ({' and '.join(held)}): a new run there would "
                         "prune its checkpoints and replace its final/; continue it with --resume auto, or start the "
                         "new run in a new --output-dir")
    inside = Path(folder).resolve().parent == (output_dir / "checkpoints").resolve() and STEP_DIR.match(folder.name)
    if not inside:
        raise ValueError(f"--resume {folder}: a checkpoint of another folder, but --output-dir {output_dir} holds a "
                         f"run of its own ({' and '.join(held)}): resume into a new --output-dir")
    if found and checkpoint_step(folder) < checkpoint_step(found[-1]):
        raise ValueError(f"--resume {folder}: --output-dir {output_dir} holds the newer checkpoint {found[-1].name}, "
                         "which continuing from an older one would prune or overwrite: resume from the latest "
                         "(--resume auto), or move the newer checkpoints out of the folder first")


def read_recorded(folder: Path) -> dict:
    """trainer_state.json of a checkpoint, with its recorded settings; messages name the file."""
    path = Path(folder) / STATE_FILE
    state = read_json_file(path, "training state")
    if not isinstance(state, dict) or not isinstance(state.get("settings"), dict):
        raise ResumeFileError(f"{path}: no recorded run settings (a checkpoint of an older version, or edited): "
                              "resume it with the version that wrote it, or start a new --output-dir")
    return state


def apply_recorded(args, state: dict | None, folder: Path | None = None) -> None:
    """Fill the flags left out from the recorded run (or the defaults when starting fresh); refuse given flags that
    differ from it, all named in one message."""
    if state is None:
        fill_settings(args)
        return
    recorded, given = state["settings"], given_settings(args)
    # files and folders are compared by content, once read (`check_resolved`): a moved or copied one is the same
    conflicts = [(name, recorded.get(name), value) for name, value in given.items()
                 if name not in PATH_SETTINGS and recorded.get(name) != value]
    if conflicts:
        raise ValueError(conflict_message(folder, conflicts))
    fill_settings(args, recorded)


def _show(value) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def conflict_message(folder, conflicts) -> str:
    flags = "; ".join(f"--{name.replace('_', '-')} {_show(old)} (recorded) vs {_show(new)} (given)"
                      for name, old, new in conflicts)
    hint = ""
    if any(name == "max_steps" for name, _, _ in conflicts):
        hint = (" (the learning-rate schedule was built for the recorded --max-steps; to train further, start a new "
                "--output-dir with --init-from <this run>/final)")
    return (f"--resume {folder}: {flags}: resume continues the recorded run{hint}; start a new --output-dir to "
            "change it, or leave the flag out")


def checked_step(folder: Path, state: dict) -> int:
    """The checkpoint's step: an integer in [0, recorded --max-steps], the one its folder is named after."""
    step, limit = state.get("step"), state["settings"].get("max_steps")
    match = STEP_DIR.match(Path(folder).name)
    valid = isinstance(step, int) and not isinstance(step, bool) and isinstance(limit, int) and 0 <= step <= limit
    if not valid or (match and int(match.group(1)) != step):
        expected = f" (its folder is {Path(folder).name})" if match else ""
        raise ResumeFileError(f"{Path(folder) / STATE_FILE}: step {step!r} is not an integer in [0, {limit}] "
                              f"matching the checkpoint{expected}: the file is damaged or was edited")
    return step


# --- what the settings resolved to, and the segments ---------------------------------------------------------------


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_record(args, config, world: int, fingerprint: str) -> dict:
    """What a checkpoint records of its run: the settings (every flag of RUN_SETTINGS, filled in) and what they
    resolved to."""
    settings = {name: str(value) if name in PATH_SETTINGS and value is not None else value
                for name, value in ((name, getattr(args, name)) for name in RUN_SETTINGS)}
    settings.update(attn_res=config.attn_res_mode,
                    block_size=config.attn_res_block_size if config.attn_res_mode == "block" else None)
    deepspeed = json.loads(Path(args.deepspeed).read_text()) if args.deepspeed is not None else None
    return dict(settings=settings, world_size=world, data_fingerprint=fingerprint, model=digest(config.to_dict()),
                deepspeed=None if deepspeed is None else digest(deepspeed),
                engine="fsdp2" if fsdp_launch() else "deepspeed" if args.deepspeed is not None else "accelerate",
                recipe=Recipe.from_args(args).record())  # provenance: the settings decide it, a resume checks those


def check_resolved(folder: Path, state: dict, record: dict) -> None:
    """What the settings resolve to must match too: the data's content, the model config (--config, --init-from),
    the DeepSpeed config, the process count."""
    differences = []
    if state.get("data_fingerprint") != record["data_fingerprint"]:
        differences.append(f"--data {record['settings']['data']}: other data (fingerprint "
                           f"{state.get('data_fingerprint')} recorded, {record['data_fingerprint']} given; recorded "
                           f"--data {state['settings'].get('data')})")
    if state.get("model") != record["model"]:
        differences.append("the model config (--config, --model-size, --init-from, --attn-res, --block-size) differs "
                           "from the recorded one")
    if state.get("deepspeed") != record["deepspeed"]:
        differences.append(f"--deepspeed {record['settings']['deepspeed']}: another DeepSpeed config than the "
                           f"recorded {state['settings'].get('deepspeed')}")
    if state.get("engine", record["engine"]) != record["engine"]:  # checkpoints before the field: not compared
        differences.append(f"engine {state['engine']} (recorded) vs {record['engine']} (now): the checkpoint's "
                           "format is its engine's")
    if state.get("world_size") != record["world_size"]:
        differences.append(f"processes {state.get('world_size')} (recorded) vs {record['world_size']} (now)")
    if differences:
        raise ValueError(f"--resume {folder}: {'; '.join(differences)}: resume continues the recorded run; start a "
                         "new --output-dir to change it")


def new_segment(start_step: int, argv: list[str], fingerprint: str) -> dict:
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return dict(start_step=start_step, end_step=start_step, argv=list(argv), started=started, pid=os.getpid(),
                data_fingerprint=fingerprint)
