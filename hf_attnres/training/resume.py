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
Which checkpoint, and that a run never outlives or overwrites a newer state in its --output-dir, is every trainer's
rule (`checkpoints.choose_checkpoint`). The checkpoint's step is checked (an integer in [0, recorded --max-steps]
matching its folder name), and the state keeps one record per segment (start and end step, command line, start
time, data fingerprint): the provenance training_info.json copies them.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from pathlib import Path

from .args import PATH_SETTINGS, RUN_SETTINGS, fill_settings, given_settings
from .checkpoints import STATE_FILE, ResumeFileError, checked_step
from .fsdp2 import fsdp_launch
from .recipe import Recipe


def continue_recorded(args, folder: Path, state: dict) -> None:
    """The train command's rule for the checkpoint `checkpoints.choose_checkpoint` found: it records its run's
    settings; the flags given must match them and those left out take them (`apply_recorded`); its step is valid."""
    if not isinstance(state.get("settings"), dict):
        raise ResumeFileError(f"{Path(folder) / STATE_FILE}: no recorded run settings (a checkpoint of an older "
                              "version, or edited): resume it with the version that wrote it, or start a new "
                              "--output-dir")
    apply_recorded(args, state, folder)
    checked_step(folder, state, state["settings"].get("max_steps"))


def apply_recorded(args, state: dict, folder: Path) -> None:
    """Fill the flags left out from the recorded run; refuse given flags that differ from it, all named in one
    message."""
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


def _group_settings(args, group: str) -> dict[str, str]:
    """{optimizer field: the recorded setting(s) that decide it} for one of the recipe's parameter groups."""
    depth = "lr x attn_res_lr_multiplier"
    lr = {"decay": "lr", "no_decay": "lr", "res_proj": "res_proj_lr" if args.res_proj_lr else depth,
          "res_norm": depth}.get(group, "lr")
    decay = {"decay": "weight_decay", "res_proj": "res_proj_weight_decay"}.get(group)
    return dict(lr=lr, **({"weight_decay": decay} if decay else {}))


def check_restored_rates(engine, folder: Path, args) -> None:
    """After a resume restored the optimizer and schedule: each parameter group's peak learning rate (the schedule's
    base) and weight decay are the ones the recorded settings give, which training_info.json then records. They
    come from the checkpoint's optimizer state, not from trainer_state.json's settings, so an edited settings field
    would otherwise be recorded while the old value trains. ResumeFileError naming the field and the file."""
    recipe = Recipe.from_args(args)
    expected = {group["name"]: group for group in recipe.param_groups(engine.module.named_parameters())}
    groups = engine.optimizer.param_groups
    base_lrs = getattr(engine.scheduler, "base_lrs", None) or [group.get("initial_lr") for group in groups]
    differences: dict[tuple, list[str]] = {}  # (setting, field, recorded, restored): the groups where it differs
    for group, peak in zip(groups, base_lrs):
        want = expected.get(group.get("name"))
        if want is None:
            continue
        restored = dict(lr=peak, weight_decay=group.get("weight_decay"))
        for field, setting in _group_settings(args, group["name"]).items():
            if restored[field] is not None and not math.isclose(restored[field], want[field], rel_tol=1e-6):
                differences.setdefault((setting, field, want[field], restored[field]), []).append(group["name"])
    if differences:
        lines = "; ".join(f"settings.{setting} gives {field} {want:g}, the optimizer state holds {held:g} (group"
                          f"{'s' if len(names) > 1 else ''} {', '.join(names)})"
                          for (setting, field, want, held), names in differences.items())
        raise ResumeFileError(f"--resume {folder}: {Path(folder) / STATE_FILE} disagrees with the optimizer state "
                              f"beside it: {lines}: the file was edited or belongs to another run; restore it, or "
                              "start a new --output-dir")
