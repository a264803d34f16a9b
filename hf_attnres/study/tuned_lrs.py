"""Each arm's own learning rate for the main job: the best LRs of the committed study, and where each
came from. The main job trains its pair with the study's model (`grid.study_config`), data and schedule, so that at
its defaults these are the bests of exactly what it trains; at another setting they are the nearest the study has,
and the summary says the run differs from what was tuned.

The numbers are the study's committed result (tests/study/test_tuned_lrs.py recomputes them from the records with
`grid.best_lrs`, so a study that moves a best fails the test until this table follows).
"""
from __future__ import annotations

from .grid import RunKey

STUDY_GRID = "configs/study/cpu-lr.json"
STUDY_RECORDS = "docs/results/study-cpu-lr/runs"
STUDY_REPORT = ("docs/RESULTS.md, 'A fair comparison at the main job's scale, each arm at its own learning rate "
                "(issue 19)'")
STUDY_LRS = (0.0015, 0.003, 0.006, 0.012, 0.024)  # the swept axis (seed 0)
STUDY_METRIC = "final validation loss of seed 0 on the first 384 of the 491 validation sequences (train's eval)"
# What the study's runs share: a run of the main job with other values is not what the LRs were tuned for
STUDY_SETTING = dict(layers=12, vocab_size=4096, seq_len=128, steps=500, micro_batch_size=16, warmup_steps=50,
                     files=None)
STUDY_MODEL = dict(heads=4, attention="mla", mlp="dense")  # the grid's "model" (the main job's layout)
# (mode, hidden, block size) -> (best lr, the study's arm, its group). Block sizes other than 3 were swept at hidden
# 128 only; the other widths come from the scaling group's per-size sweeps
BEST = {
    ("standard", 128, 0): (0.012, "standard", "lr_sweep"),
    ("block", 128, 3): (0.003, "block", "lr_sweep"),
    ("block", 128, 1): (0.003, "block-S1", "lr_sweep"),
    ("block", 128, 2): (0.003, "block-S2", "lr_sweep"),
    ("block", 128, 4): (0.003, "block-S4", "lr_sweep"),
    ("block", 128, 6): (0.003, "block-S6", "lr_sweep"),
    ("block", 128, 12): (0.024, "block-S12", "lr_sweep"),
    ("standard", 64, 0): (0.012, "standard", "scaling"),
    ("block", 64, 3): (0.006, "block", "scaling"),
    ("standard", 96, 0): (0.006, "standard", "scaling"),
    ("block", 96, 3): (0.006, "block", "scaling"),
    ("standard", 192, 0): (0.006, "standard", "scaling"),
    ("block", 192, 3): (0.003, "block", "scaling"),
}
# The seed-0 loss of each best run (its record's val_loss), for the summary's provenance
BEST_LOSS = {
    "standard-lr0.012-L12-h128-seed0": 4.903472900390625, "block-lr0.003-L12-h128-seed0": 4.783939361572266,
    "block-S1-lr0.003-L12-h128-seed0": 4.782378673553467, "block-S2-lr0.003-L12-h128-seed0": 4.759716033935547,
    "block-S4-lr0.003-L12-h128-seed0": 4.813310623168945, "block-S6-lr0.003-L12-h128-seed0": 4.822177410125732,
    "block-S12-lr0.024-L12-h128-seed0": 4.768299579620361, "standard-lr0.012-L12-h64-seed0": 4.899912357330322,
    "block-lr0.006-L12-h64-seed0": 4.815649509429932, "standard-lr0.006-L12-h96-seed0": 4.9130659103393555,
    "block-lr0.006-L12-h96-seed0": 4.8377203941345215, "standard-lr0.006-L12-h192-seed0": 4.912478923797607,
    "block-lr0.003-L12-h192-seed0": 4.705159664154053,
}


def study_lr(mode: str, hidden: int, block_size: int) -> tuple[float, dict]:
    """(the study's best LR for this arm, its provenance): the entry for (mode, hidden, block size) when the study
    swept it, else the nearest the study has (hidden 128 at this block size, else hidden 128's S=3), saying so."""
    size = block_size if mode == "block" else 0
    wanted = (mode, hidden, size)
    found = next(k for k in (wanted, (mode, 128, size), (mode, 128, 3 if size else 0)) if k in BEST)
    lr, arm, group = BEST[found]
    run = RunKey(mode, found[2], STUDY_SETTING["layers"], found[1], 0, None, arm, lr).id
    provenance = dict(
        grid=STUDY_GRID, group=group, arm=arm, hidden=found[1], block_size=found[2] or None, swept=list(STUDY_LRS),
        best_run=f"{STUDY_RECORDS}/{run}/result.json", best_run_loss=BEST_LOSS[run], metric=STUDY_METRIC,
        report=STUDY_REPORT)
    if found != wanted:
        provenance["nearest"] = (f"the study did not sweep {mode}" + (f" S={size}" if size else "")
                                 + f" at hidden {hidden}: its best at hidden {found[1]}"
                                 + (f", S={found[2]}" if found[2] else ""))
    return lr, provenance


def differences(args) -> list[str]:
    """The main job's flags that differ from the study's setting ('--steps 50 (study: 500)'); [] at the defaults."""
    given = dict(layers=args.layers, vocab_size=args.vocab_size, seq_len=args.seq_len, steps=args.steps,
                 micro_batch_size=args.micro_batch_size, files=args.files,
                 warmup_steps=args.warmup_steps if args.warmup_steps is not None else args.steps // 10)
    return [f"--{name.replace('_', '-')} {given[name]} (study: {value})" for name, value in STUDY_SETTING.items()
            if given[name] != value]
