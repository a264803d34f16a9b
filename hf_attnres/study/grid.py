"""The study's grid file: what to train, expanded into runs with stable ids.

A grid is a JSON file (configs/study/*.json):

    {"name": "cpu",
     "data":  {"dir": "data/study-bpe4096",
               "prepare": ["--tokenizer", "bpe", "--vocab-size", "4096", "--seq-len", "128"]},
     "model": {"layers": 8, "hidden": 64, "block_size": 2, "attention": "mla", "mlp": "dense"},
     "train": {"max_steps": 300, "micro_batch_size": 16, "lr": 0.003, "warmup_steps": 30},
     "groups": {"main": {"modes": ["standard", "block", "full"], "seeds": [0, 1, 2]}, ...}}

Groups (each optional) and the axes they vary; everything else comes from "model":
    main        modes x seeds                         the matched comparison (at train.lr)
    ablations   ablations x seeds, on mode "base"     the paper's section 5.3 switches (at train.lr)
    block_size  block_sizes x seeds (block mode)      the paper's block-size sweep (at train.lr)
    scaling     modes x hidden x seeds                the scaling fit (at least three sizes; at train.lr)
                or arms x hidden x seeds with "lr"    ... each arm at a number or "tuned" (its best sweep LR)
                or ... "lr": "swept" with "lrs"       ... each arm swept over lrs at every size (first seed), the
                                                      other seeds at that size's best: the best LR moves with width
    lr_sweep    arms x lrs x seeds                    every arm at every learning rate
    tuned       arms x seeds                          every arm at its own best learning rate of lr_sweep
    screen      arms x seeds at "lr_of"'s best LR     a cheaper first look: each change at one reference arm's best
                                                      learning rate (e.g. Full's candidate explanations at Full's);
                                                      an arm that moves gets a sweep of its own (move it to lr_sweep)
A run shared by several groups (the main block run is also a sweep point) is trained once.

Arms (the unit of a fair comparison: each is tuned on its own): "standard", "block" (model.block_size) and "full"
are built in; the grid's "arms" object adds named ones, each {"mode", "block_size" (block mode), "ablation",
"config" (initialization fields of the model config), "train" (res_proj_lr_scale, res_proj_weight_decay,
warmup_steps)}. Runs that wait for a sweep (tuned, scaling at "tuned") exist once every run of their arm's sweep has
finished: `Grid.runs(best_lrs)` lists them for the best learning rates known so far. A swept scaling group's
best LRs are keyed (arm, hidden) in the same dict.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from ..core.config import ATTN_RES_MODES
from ..families.upcycle import BLOCK_SIZE_MODES
from ..folders.json_limits import JSONDepthError, loads_limited
from ..utils.flags import SEED_MAX

# The paper's ablations (section 5.3) as KimiLinearAttnResConfig switches
ABLATIONS = {
    "static": dict(attn_res_static_mixing=True),       # input-independent depth weights (DenseFormer-style)
    "sigmoid": dict(attn_res_score="sigmoid"),         # sigmoid gates instead of the softmax
    "no_key_norm": dict(attn_res_key_norm=False),      # raw sources as keys
}
GROUPS = {
    "main": ("modes", "seeds"),
    "ablations": ("base", "ablations", "seeds"),
    "block_size": ("block_sizes", "seeds"),
    "scaling": ("modes", "hidden", "seeds"),
    "lr_sweep": ("arms", "lrs", "seeds"),
    "tuned": ("arms", "seeds"),
    "screen": ("arms", "seeds", "lr_of"),
}
SCALING_ARMS = ("arms", "hidden", "seeds", "lr")  # the scaling group's other form: arms, each at its own LR
SCALING_SWEPT = (*SCALING_ARMS, "lrs")  # ... with "lr": "swept": each arm's LR found anew at every size
# What an arm may change besides the residual: model initialization (never the architecture K3 reads) and training
ARM_CONFIG_FIELDS = ("attn_res_query_init_std", "attn_res_key_norm_init")
ARM_TRAIN_FIELDS = ("res_proj_lr_scale", "res_proj_weight_decay", "warmup_steps", "attn_res_lr_multiplier")
BUILTIN_ARMS = ("standard", "block", "full")
# an arm's mode: the config's modes, or "gated", Block's layout read through the gated read
# (hf_attnres.core.gated_read: attn_res_mode "block" with attn_res_gated_read); the upcycle's block-size modes take one
ARM_MODES = (*ATTN_RES_MODES, "gated")
MODEL_DEFAULTS = dict(layers=8, hidden=64, block_size=2, attention="mla", mlp="dense", heads=4)
TRAIN_DEFAULTS = dict(max_steps=300, micro_batch_size=16, grad_accum=1, seq_len=None, lr=3e-3, warmup_steps=30,
                      eval_points=4, eval_batches=16, log_every=10, extra_args=[], launcher=[], metric="whole-split")
# train.metric, the loss a run is compared on: the final model on the whole validation split (train's final eval), or
# (the committed grids, whose records predate it) the final eval over the first eval_batches global batches only
METRICS = ("whole-split", "eval-batches")
MAX_LR = 1.0  # the largest learning rate a grid may sweep


@dataclass(frozen=True)
class RunKey:
    """What distinguishes one run of the grid (the shared settings live in the grid)."""

    mode: str
    block_size: int  # 0 unless block mode
    layers: int
    hidden: int
    seed: int
    ablation: str | None = None
    arm: str | None = None  # a named arm of the grid (then `lr` is its learning rate)
    lr: float | None = None  # None: train.lr

    @property
    def id(self) -> str:
        if self.arm is not None:
            return f"{self.arm}-lr{self.lr:g}-L{self.layers}-h{self.hidden}-seed{self.seed}"
        size = f"-S{self.block_size}" if self.mode == "block" else ""
        ablation = f"-{self.ablation}" if self.ablation else ""
        return f"{self.mode}{size}{ablation}-L{self.layers}-h{self.hidden}-seed{self.seed}"

    def to_dict(self) -> dict:
        # arm and lr only when set: the records of grids without arms keep the spec they were written with
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("arm", "lr")}


@dataclass
class Grid:
    name: str
    data: dict
    model: dict
    train: dict
    groups: dict
    source: str = "<dict>"
    arms: dict = dataclass_field(default_factory=dict)  # the named arms (built-in ones too), each fully defined

    def runs(self, group: str | None = None, best_lrs: dict | None = None) -> list[RunKey]:
        """The runs of one group, or of every group without duplicates, in the grid file's group order and seed by
        seed within a group (so a study cut short already holds whole seeds of its first group). Runs at an arm's
        best learning rate are listed only for the arms in `best_lrs` ({arm: lr}, see `best_lrs`)."""
        best = best_lrs or {}
        if group is not None:
            return list(dict.fromkeys(self._expand(group, best)))
        keys = []
        for name in self.groups:
            if name in ("tuned", "screen") and "lr_sweep" in self.groups:
                continue  # listed with its arm's sweep (below)
            if name == "lr_sweep":
                # each arm's sweep, then its tuned seeds: a study cut short holds whole arms, and a worker picks up an
                # arm's tuned seeds as soon as its sweep is done
                tuned = self._expand("tuned", best) if "tuned" in self.groups else []
                screen = self._expand("screen", best) if "screen" in self.groups else []
                screened_at = self.groups.get("screen", {}).get("lr_of")
                for arm in self.groups["lr_sweep"]["arms"]:
                    keys += [k for k in self._expand(name, best) if k.arm == arm] + [k for k in tuned if k.arm == arm]
                    keys += screen if arm == screened_at else []
                keys += [k for k in tuned if k.arm not in self.groups["lr_sweep"]["arms"]]
            else:
                keys += self._expand(name, best)
        return list(dict.fromkeys(keys))

    def key(self, mode: str, seed: int, hidden=None, block_size=None, ablation=None) -> RunKey:
        size = (block_size or self.model["block_size"]) if mode == "block" else 0
        return RunKey(mode, size, self.model["layers"], hidden or self.model["hidden"], seed, ablation)

    def arm_key(self, arm: str, lr: float, seed: int, hidden=None) -> RunKey:
        a = self.arms[arm]
        return RunKey(a["mode"], a["block_size"], self.model["layers"], hidden or self.model["hidden"], seed,
                      a["ablation"], arm, float(lr))

    def sweep_runs(self) -> list[RunKey]:
        """The runs that decide a best learning rate: lr_sweep's, and a swept scaling group's first seed."""
        keys = self.runs("lr_sweep") if "lr_sweep" in self.groups else []
        if self.groups.get("scaling", {}).get("lr") == "swept":
            keys += self._scaling_sweep({**self.groups["scaling"], "seeds": self.groups["scaling"]["seeds"][:1]}, {})
        return keys

    def waiting(self, best_lrs: dict) -> list[str]:
        """The arms whose tuned runs wait for their sweep to finish."""
        wanted = set(self.groups.get("tuned", {}).get("arms", []))
        if "screen" in self.groups:
            wanted.add(self.groups["screen"]["lr_of"])
        scaling = self.groups.get("scaling", {})
        if scaling.get("lr") == "tuned":
            wanted |= set(scaling["arms"])
        wanted = sorted(wanted - set(best_lrs))
        if scaling.get("lr") == "swept" and len(scaling["seeds"]) > 1:
            wanted += [f"{a} (hidden {h})" for h in scaling["hidden"] for a in scaling["arms"]
                       if (a, h) not in best_lrs]
        return wanted

    def _expand(self, name: str, best_lrs: dict) -> list[RunKey]:
        g = self.groups[name]
        if name == "lr_sweep":
            return [self.arm_key(a, lr, s) for s in g["seeds"] for a in g["arms"] for lr in arm_lrs(g, a)]
        if name == "tuned":
            return [self.arm_key(a, best_lrs[a], s) for s in g["seeds"] for a in g["arms"] if a in best_lrs]
        if name == "screen":
            lr = best_lrs.get(g["lr_of"])
            return [] if lr is None else [self.arm_key(a, lr, s) for s in g["seeds"] for a in g["arms"]]
        if name == "scaling" and g.get("lr") == "swept":
            return self._scaling_sweep(g, best_lrs)
        if name == "scaling" and "arms" in g:
            lrs = {(a, h): self.scaling_lr(a, h, best_lrs) for h in g["hidden"] for a in g["arms"]}
            return [self.arm_key(a, lrs[a, h], s, hidden=h) for s in g["seeds"] for h in g["hidden"] for a in g["arms"]
                    if lrs[a, h] is not None]
        if name == "main":
            return [self.key(m, s) for s in g["seeds"] for m in g["modes"]]
        if name == "ablations":
            return [self.key(g["base"], s, ablation=a) for s in g["seeds"] for a in [None, *g["ablations"]]]
        if name == "block_size":
            return [self.key("block", s, block_size=b) for s in g["seeds"] for b in g["block_sizes"]]
        return [self.key(m, s, hidden=h) for s in g["seeds"] for h in g["hidden"] for m in g["modes"]]

    def scaling_lr(self, arm: str, hidden: int, best_lrs: dict) -> float | None:
        """The LR of one arm at one size in the scaling group: its own size's best (swept), the main size's (tuned),
        or the group's number; None while a sweep has not found it."""
        lr = self.groups["scaling"]["lr"]
        return {"swept": best_lrs.get((arm, hidden)), "tuned": best_lrs.get(arm)}.get(lr, lr)

    def _scaling_sweep(self, g: dict, best_lrs: dict) -> list[RunKey]:
        """Each size's sweep (first seed), then the other seeds at the best LR found for that (arm, size). Within a
        size an arm's LRs go nearest first to the best found at that size, else at the main size, so that a study cut
        short holds each size's bracket before the sweep's far ends."""
        keys, first, rest = [], g["seeds"][0], g["seeds"][1:]
        for hidden in g["hidden"]:
            for arm in g["arms"]:
                centre = best_lrs.get((arm, hidden)) or best_lrs.get(arm)
                lrs = sorted(g["lrs"], key=lambda lr: abs(math.log(lr / centre))) if centre else g["lrs"]
                keys += [self.arm_key(arm, lr, first, hidden=hidden) for lr in lrs]
        return keys + [self.arm_key(a, best_lrs[(a, h)], s, hidden=h) for s in rest for h in g["hidden"]
                       for a in g["arms"] if (a, h) in best_lrs]


def read_grid_json(path: Path):
    """A grid file's JSON value (unchecked); ValueError naming the file when it is missing or not JSON."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--grid {path}: file not found")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"--grid {path}: not a text file (a grid is JSON text)") from None
    try:
        return loads_limited(text)
    except JSONDepthError as error:  # json.loads would recurse once per level into RecursionError
        raise ValueError(f"--grid {path}: {error}; a grid is a few levels deep") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"--grid {path}: not valid JSON ({error})") from error


def load_grid(path: Path) -> Grid:
    """Read and check a grid file; ValueError naming the file and the field when something is wrong."""
    return grid_from_dict(read_grid_json(path), str(path))


def grid_from_dict(raw: dict, source: str = "<dict>") -> Grid:
    def fail(message):
        raise ValueError(f"{source}: {message}")

    if not isinstance(raw, dict):
        fail("the grid must be a JSON object")
    unknown = set(raw) - {"name", "description", "data", "model", "train", "groups", "arms"}
    if unknown:
        fail(f"unknown top-level fields {sorted(unknown)}")
    data = raw.get("data") or fail("'data' with a 'dir' is required")
    if not isinstance(data, dict) or not isinstance(data.get("dir"), str):
        fail("data.dir must be the prepared dataset folder (a string)")
    if not isinstance(data.get("prepare", []), list):
        fail("data.prepare must be a list of scripts/prepare_data.py arguments")
    model = _merged(raw.get("model", {}), MODEL_DEFAULTS, "model", fail)
    train = _merged(raw.get("train", {}), TRAIN_DEFAULTS, "train", fail)
    for name in ("layers", "hidden", "block_size", "heads"):
        _positive(model[name], f"model.{name}", fail)
    if model["attention"] not in ("mla", "hybrid"):
        fail("model.attention must be 'mla' (MLA in every layer) or 'hybrid' (Kimi Linear's KDA + MLA), "
             f"got {model['attention']!r}")
    if model["mlp"] not in ("dense", "moe"):
        fail(f"model.mlp must be 'dense' or 'moe', got {model['mlp']!r}")
    if model["hidden"] % (2 * model["heads"]):
        fail(f"model.hidden ({model['hidden']}) must be a multiple of 2 * model.heads ({model['heads']})")
    for name in ("max_steps", "micro_batch_size", "grad_accum", "eval_points", "eval_batches", "log_every"):
        _positive(train[name], f"train.{name}", fail)
    if not isinstance(train["lr"], (int, float)) or train["lr"] <= 0:
        fail(f"train.lr must be > 0, got {train['lr']!r}")
    if train["metric"] not in METRICS:
        fail(f"train.metric must be one of {list(METRICS)}, got {train['metric']!r}")
    for field in ("extra_args", "launcher"):
        if not isinstance(train[field], list) or not all(isinstance(a, str) for a in train[field]):
            fail(f"train.{field} must be a list of strings")
    arms = _arms(raw.get("arms", {}), model, fail)
    groups = raw.get("groups") or fail("'groups' needs at least one of " + ", ".join(GROUPS))
    if not isinstance(groups, dict):
        fail("groups must be an object")
    for name, group in groups.items():
        _check_group(name, group, model, fail, arms)
    swept = set(groups.get("lr_sweep", {}).get("arms", []))
    for name, group in groups.items():
        if name == "tuned" or (name == "scaling" and group.get("lr") == "tuned"):
            if set(group["arms"]) - swept:
                fail(f"groups.{name}: arms {sorted(set(group['arms']) - swept)} are tuned but not in groups.lr_sweep")
        if name == "screen" and group["lr_of"] not in swept:
            fail(f"groups.screen.lr_of: {group['lr_of']!r} must be an arm of groups.lr_sweep (its best LR is the "
                 "screen's)")
    return Grid(str(raw.get("name", Path(source).stem)), data, model, train, groups, source, arms)


def _arms(given, model: dict, fail) -> dict:
    """The built-in arms and the grid's own, each completed to {mode, block_size, ablation, config, train}."""
    if not isinstance(given, dict):
        fail("arms must be an object of named arms")
    arms = {"standard": dict(mode="standard"), "block": dict(mode="block"), "full": dict(mode="full")}
    for name, arm in given.items():
        if name in BUILTIN_ARMS:
            fail(f"arms.{name}: {list(BUILTIN_ARMS)} are built in; give this arm another name")
        if not isinstance(name, str) or not name or any(c in name for c in "/\\ ") or not isinstance(arm, dict):
            fail(f"arms.{name!r}: an arm is a name (no spaces or slashes) and an object")
        unknown = set(arm) - {"mode", "block_size", "ablation", "config", "train"}
        if unknown:
            fail(f"arms.{name}: unknown fields {sorted(unknown)}")
        arms[name] = arm
    for name, arm in arms.items():
        where = f"arms.{name}"
        if arm.get("mode") not in ARM_MODES:
            fail(f"{where}.mode must be one of {ARM_MODES}, got {arm.get('mode')!r}")
        size = arm.get("block_size", model["block_size"]) if arm["mode"] in BLOCK_SIZE_MODES else 0
        if arm["mode"] in BLOCK_SIZE_MODES:
            _positive(size, f"{where}.block_size", fail)
        elif "block_size" in arm:
            fail(f"{where}.block_size applies to modes {BLOCK_SIZE_MODES} only")
        ablation = arm.get("ablation")
        if ablation is not None and (ablation not in ABLATIONS or arm["mode"] == "standard"):
            fail(f"{where}.ablation must be one of {list(ABLATIONS)} on mode block or full, got {ablation!r}")
        config, train = arm.get("config", {}), arm.get("train", {})
        for part, allowed in ((config, ARM_CONFIG_FIELDS), (train, ARM_TRAIN_FIELDS)):
            if not isinstance(part, dict) or set(part) - set(allowed):
                fail(f"{where}: config / train may set only {list(allowed)}, got {part!r}")
            for key, value in part.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                    fail(f"{where}.{key} must be a finite number >= 0, got {value!r}")
            if part.get("attn_res_lr_multiplier", 1) <= 0:
                fail(f"{where}.attn_res_lr_multiplier must be > 0, got {part['attn_res_lr_multiplier']!r}")
        arms[name] = dict(mode=arm["mode"], block_size=size, ablation=ablation, config=config, train=train)
    return arms


def _merged(given, defaults: dict, section: str, fail) -> dict:
    if not isinstance(given, dict):
        fail(f"{section} must be an object")
    unknown = set(given) - set(defaults)
    if unknown:
        fail(f"unknown {section} fields {sorted(unknown)} (known: {sorted(defaults)})")
    return {**defaults, **given}


def _positive(value, field: str, fail) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        fail(f"{field} must be an integer >= 1, got {value!r}")


def _check_group(name: str, group, model: dict, fail, arms: dict, one_lr: bool = False) -> None:
    """`one_lr`: an arm of the per-arm form, which may have a single LR (its best of an earlier sweep, held
    fixed)."""
    if name not in GROUPS:
        fail(f"unknown group {name!r} (known: {', '.join(GROUPS)})")
    axes = GROUPS[name]
    if name == "scaling" and isinstance(group, dict) and "arms" in group:
        axes = SCALING_SWEPT if group.get("lr") == "swept" else SCALING_ARMS
    if not isinstance(group, dict) or set(group) != set(axes):
        fail(f"groups.{name} needs exactly the fields {list(axes)}"
             + (f" (or {list(SCALING_ARMS)}, or {list(SCALING_SWEPT)} with lr 'swept')" if name == "scaling" else ""))
    for axis in axes:
        if axis == "lr_of":
            continue  # checked against groups.lr_sweep once every group is read
        if axis == "lr":
            if group["lr"] not in ("tuned", "swept") and (isinstance(group["lr"], bool)
                                                         or not isinstance(group["lr"], (int, float))
                                                         or not group["lr"] > 0):
                fail(f"groups.{name}.lr must be 'tuned' (each arm's best sweep LR), 'swept' (each arm swept over "
                     "lrs at every size) or a number > 0")
            continue
        values = group[axis]
        if axis == "lrs" and name == "lr_sweep" and isinstance(values, dict):
            if set(values) != set(group["arms"]):
                fail(f"groups.{name}.lrs: one list per arm of groups.{name}.arms, got {sorted(values)}")
            for arm, lrs in values.items():
                _check_group(name, dict(group, arms=[arm], lrs=lrs), model, fail, arms, one_lr=True)
            continue
        if axis == "base":
            if values not in ("block", "full"):
                fail(f"groups.{name}.base must be 'block' or 'full' (the ablations change the depth mix), "
                     f"got {values!r}")
            continue
        if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
            fail(f"groups.{name}.{axis} must be a non-empty list without repeats")
        for value in values:
            if axis == "arms" and value not in arms:
                fail(f"groups.{name}.arms: {value!r} is not an arm (known: {sorted(arms)})")
            elif axis == "lrs" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                    or not 0 < value <= MAX_LR):
                fail(f"groups.{name}.lrs: {value!r} is not a number in (0, {MAX_LR:g}] (AdamW at a larger learning "
                     "rate diverges on the first step)")
            elif axis == "modes" and value not in ATTN_RES_MODES:
                fail(f"groups.{name}.modes: {value!r} is not one of {ATTN_RES_MODES}")
            elif axis == "ablations" and value not in ABLATIONS:
                fail(f"groups.{name}.ablations: {value!r} is not one of {list(ABLATIONS)}")
            elif axis == "seeds" and (not isinstance(value, int) or isinstance(value, bool)
                                      or not 0 <= value <= SEED_MAX):
                fail(f"groups.{name}.seeds: {value!r} is not an integer from 0 to {SEED_MAX} (2**32 - 1)")
            elif axis in ("block_sizes", "hidden"):
                _positive(value, f"groups.{name}.{axis}", fail)
                if axis == "hidden" and value % (2 * model["heads"]):
                    fail(f"groups.{name}.hidden: {value} is not a multiple of 2 * model.heads ({model['heads']})")
    if name == "scaling" and len(group["hidden"]) < 3:
        fail(f"groups.scaling.hidden needs at least three model sizes for the fit, got {group['hidden']}")
    if isinstance(group.get("lrs"), list) and len(group["lrs"]) < 2 and not one_lr:
        fail(f"groups.{name}.lrs needs at least two learning rates to pick a best one, got {group['lrs']}")


def model_config(grid: Grid, key: RunKey, vocab_size: int):
    """The `KimiLinearAttnResConfig` of one run (see `study_config`), with its ablation and its arm's init fields."""
    fields = dict(ABLATIONS.get(key.ablation, {}))
    if key.arm is not None:
        fields.update(grid.arms[key.arm]["config"])
    return study_config(grid.model, key.mode, key.block_size, key.layers, key.hidden, vocab_size, **fields)


def study_config(model: dict, mode: str, block_size: int, layers: int, hidden: int, vocab_size: int, **overrides):
    """A study model: MLA (or Kimi Linear's hybrid) layers, head sizes scaled with the width, no padding index
    (packed data: every token is real). `model`: a grid's "model" (heads, attention, mlp). The main job builds its
    pair with it too, so that the study's best learning rates are those of the model the main job trains."""
    from ..utils.tiny import hybrid_layer_types, tiny_config

    m, h = model, hidden
    head = h // m["heads"]
    fields = dict(
        vocab_size=vocab_size, hidden_size=h, num_attention_heads=m["heads"], num_key_value_heads=m["heads"],
        qk_nope_head_dim=head // 2, qk_rope_head_dim=head // 2, v_head_dim=head, kv_lora_rank=max(16, h // 4),
        linear_num_heads=m["heads"], linear_head_dim=head, pad_token_id=None,
        layer_types=["full_attention"] * layers if m["attention"] == "mla" else hybrid_layer_types(layers),
    )
    if m["mlp"] == "dense":
        fields.update(intermediate_size=3 * h, mlp_layer_types=["dense"] * layers)
    else:
        fields.update(intermediate_size=2 * h, moe_intermediate_size=max(8, h // 2))
    fields.update(overrides)
    if mode == "gated":  # an arm's mode, not the config's: Block's layout with the gated read
        mode, fields["attn_res_gated_read"] = "block", True
    return tiny_config(mode, block_size, layers, **fields, family="kimi_linear")


def best_lrs(grid: Grid, records: dict) -> dict:
    """{arm: the learning rate of lr_sweep with the lowest final validation loss (mean over the sweep's seeds)}, for
    the arms whose sweep has found it: every sweep run has a record in `records` ({run id: record}), or the best
    finished LR is bracketed, its two neighbours in the sweep finished and worse (an LR curve has one minimum: the
    points beyond a worse neighbour cannot win, so the arm's tuned and screen runs need not wait for them; they still
    run, and should one win after all, the best moves and its runs are listed anew). A swept scaling group adds
    {(arm, hidden): lr} by the same rule, from each size's first seed."""
    best = {}
    g = grid.groups.get("lr_sweep")
    for arm in g["arms"] if g else []:
        runs = {lr: [records.get(grid.arm_key(arm, lr, s).id) for s in g["seeds"]] for lr in arm_lrs(g, arm)}
        _keep_best(best, arm, arm_lrs(g, arm), runs)
    scaling = grid.groups.get("scaling", {})
    if scaling.get("lr") == "swept":  # the same rule at every size, on the size's first seed
        for hidden in scaling["hidden"]:
            for arm in scaling["arms"]:
                runs = {lr: [records.get(grid.arm_key(arm, lr, scaling["seeds"][0], hidden=hidden).id)]
                        for lr in scaling["lrs"]}
                _keep_best(best, (arm, hidden), scaling["lrs"], runs)
    return best


def arm_lrs(group: dict, arm: str) -> list:
    """An arm's sweep LRs: the group's list, or the arm's own where "lrs" is {arm: [...]} (arms whose best LRs lie
    far apart, such as a fine-tune and a frozen backbone)."""
    return group["lrs"][arm] if isinstance(group["lrs"], dict) else group["lrs"]


def _keep_best(best: dict, name, lrs: list, runs: dict) -> None:
    """best[name] = the LR of lowest mean loss over its runs ({lr: [record or None]}), once it is known: every LR
    finished, or the best finished one bracketed by two finished, worse neighbours."""
    mean = {lr: sum(r["val_loss"] for r in rs) / len(rs) for lr, rs in runs.items() if all(rs)}
    if not mean:
        return
    top = min(mean, key=mean.get)
    i = lrs.index(top)
    bracketed = 0 < i < len(lrs) - 1 and all(lrs[j] in mean and mean[lrs[j]] > mean[top] for j in (i - 1, i + 1))
    if len(mean) == len(lrs) or bracketed:
        best[name] = top
