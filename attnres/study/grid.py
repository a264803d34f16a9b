"""The study's grid file: what to train, expanded into runs with stable ids.

A grid is a JSON file (configs/study/*.json):

    {"name": "cpu",
     "data":  {"dir": "data/study-bpe4096",
               "prepare": ["--tokenizer", "bpe", "--vocab-size", "4096", "--seq-len", "128"]},
     "model": {"layers": 8, "hidden": 64, "block_size": 2, "attention": "mla", "mlp": "dense"},
     "train": {"max_steps": 300, "micro_batch_size": 16, "lr": 0.003, "warmup_steps": 30},
     "groups": {"main": {"modes": ["standard", "block", "full"], "seeds": [0, 1, 2]}, ...}}

Groups (each optional) and the axes they vary; everything else comes from "model":
    main        modes x seeds                         the matched comparison
    ablations   ablations x seeds, on mode "base"     the paper's section 5.3 switches
    block_size  block_sizes x seeds (block mode)      the paper's block-size sweep
    scaling     modes x hidden x seeds                the scaling fit (at least three sizes)
A run shared by several groups (the main block run is also a sweep point) is trained once.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..configuration_attnres import ATTN_RES_MODES

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
}
MODEL_DEFAULTS = dict(layers=8, hidden=64, block_size=2, attention="mla", mlp="dense", heads=4)
TRAIN_DEFAULTS = dict(max_steps=300, micro_batch_size=16, grad_accum=1, seq_len=None, lr=3e-3, warmup_steps=30,
                      eval_points=4, eval_batches=16, log_every=10, extra_args=[], launcher=[])


@dataclass(frozen=True)
class RunKey:
    """What distinguishes one run of the grid (the shared settings live in the grid)."""

    mode: str
    block_size: int  # 0 unless block mode
    layers: int
    hidden: int
    seed: int
    ablation: str | None = None

    @property
    def id(self) -> str:
        size = f"-S{self.block_size}" if self.mode == "block" else ""
        ablation = f"-{self.ablation}" if self.ablation else ""
        return f"{self.mode}{size}{ablation}-L{self.layers}-h{self.hidden}-seed{self.seed}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Grid:
    name: str
    data: dict
    model: dict
    train: dict
    groups: dict
    source: str = "<dict>"

    def runs(self, group: str | None = None) -> list[RunKey]:
        """The runs of one group, or of every group without duplicates, in the grid file's group order and seed by
        seed within a group (so a study cut short already holds whole seeds of its first group)."""
        names = [group] if group is not None else list(self.groups)
        return list(dict.fromkeys(key for name in names for key in self._expand(name)))

    def key(self, mode: str, seed: int, hidden=None, block_size=None, ablation=None) -> RunKey:
        size = (block_size or self.model["block_size"]) if mode == "block" else 0
        return RunKey(mode, size, self.model["layers"], hidden or self.model["hidden"], seed, ablation)

    def _expand(self, name: str) -> list[RunKey]:
        g = self.groups[name]
        if name == "main":
            return [self.key(m, s) for s in g["seeds"] for m in g["modes"]]
        if name == "ablations":
            return [self.key(g["base"], s, ablation=a) for s in g["seeds"] for a in [None, *g["ablations"]]]
        if name == "block_size":
            return [self.key("block", s, block_size=b) for s in g["seeds"] for b in g["block_sizes"]]
        return [self.key(m, s, hidden=h) for s in g["seeds"] for h in g["hidden"] for m in g["modes"]]


def load_grid(path: Path) -> Grid:
    """Read and check a grid file; ValueError naming the file and the field when something is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--grid {path}: file not found")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"--grid {path}: not valid JSON ({error})") from error
    return grid_from_dict(raw, str(path))


def grid_from_dict(raw: dict, source: str = "<dict>") -> Grid:
    def fail(message):
        raise ValueError(f"{source}: {message}")

    if not isinstance(raw, dict):
        fail("the grid must be a JSON object")
    unknown = set(raw) - {"name", "description", "data", "model", "train", "groups"}
    if unknown:
        fail(f"unknown top-level fields {sorted(unknown)}")
    data = raw.get("data") or fail("'data' with a 'dir' is required")
    if not isinstance(data, dict) or not isinstance(data.get("dir"), str):
        fail("data.dir must be the prepared dataset folder (a string)")
    if not isinstance(data.get("prepare", []), list):
        fail("data.prepare must be a list of scripts/prepare_data.py arguments")
    model = _merged(raw.get("model", {}), MODEL_DEFAULTS, "model", fail)
    train = _merged(raw.get("train", {}), TRAIN_DEFAULTS, "train", fail)
    for field in ("layers", "hidden", "block_size", "heads"):
        _positive(model[field], f"model.{field}", fail)
    if model["attention"] not in ("mla", "hybrid"):
        fail("model.attention must be 'mla' (MLA in every layer) or 'hybrid' (Kimi Linear's KDA + MLA), "
             f"got {model['attention']!r}")
    if model["mlp"] not in ("dense", "moe"):
        fail(f"model.mlp must be 'dense' or 'moe', got {model['mlp']!r}")
    if model["hidden"] % (2 * model["heads"]):
        fail(f"model.hidden ({model['hidden']}) must be a multiple of 2 * model.heads ({model['heads']})")
    for field in ("max_steps", "micro_batch_size", "grad_accum", "eval_points", "eval_batches", "log_every"):
        _positive(train[field], f"train.{field}", fail)
    if not isinstance(train["lr"], (int, float)) or train["lr"] <= 0:
        fail(f"train.lr must be > 0, got {train['lr']!r}")
    for field in ("extra_args", "launcher"):
        if not isinstance(train[field], list) or not all(isinstance(a, str) for a in train[field]):
            fail(f"train.{field} must be a list of strings")
    groups = raw.get("groups") or fail("'groups' needs at least one of " + ", ".join(GROUPS))
    if not isinstance(groups, dict):
        fail("groups must be an object")
    for name, group in groups.items():
        _check_group(name, group, model, fail)
    return Grid(str(raw.get("name", Path(source).stem)), data, model, train, groups, source)


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


def _check_group(name: str, group, model: dict, fail) -> None:
    if name not in GROUPS:
        fail(f"unknown group {name!r} (known: {', '.join(GROUPS)})")
    if not isinstance(group, dict) or set(group) != set(GROUPS[name]):
        fail(f"groups.{name} needs exactly the fields {list(GROUPS[name])}")
    for axis in GROUPS[name]:
        values = group[axis]
        if axis == "base":
            if values not in ("block", "full"):
                fail(f"groups.{name}.base must be 'block' or 'full' (the ablations change the depth mix), "
                     f"got {values!r}")
            continue
        if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
            fail(f"groups.{name}.{axis} must be a non-empty list without repeats")
        for value in values:
            if axis == "modes" and value not in ATTN_RES_MODES:
                fail(f"groups.{name}.modes: {value!r} is not one of {ATTN_RES_MODES}")
            elif axis == "ablations" and value not in ABLATIONS:
                fail(f"groups.{name}.ablations: {value!r} is not one of {list(ABLATIONS)}")
            elif axis == "seeds" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                fail(f"groups.{name}.seeds: {value!r} is not an integer >= 0")
            elif axis in ("block_sizes", "hidden"):
                _positive(value, f"groups.{name}.{axis}", fail)
                if axis == "hidden" and value % (2 * model["heads"]):
                    fail(f"groups.{name}.hidden: {value} is not a multiple of 2 * model.heads ({model['heads']})")
    if name == "scaling" and len(group["hidden"]) < 3:
        fail(f"groups.scaling.hidden needs at least three model sizes for the fit, got {group['hidden']}")


def model_config(grid: Grid, key: RunKey, vocab_size: int):
    """The `KimiLinearAttnResConfig` of one run: MLA (or Kimi Linear's hybrid) layers, head sizes scaled with the
    width, no padding index (packed data: every token is real)."""
    from ..tiny import hybrid_layer_types, tiny_config

    m, h, layers = grid.model, key.hidden, key.layers
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
    fields.update(ABLATIONS.get(key.ablation, {}))
    return tiny_config(key.mode, key.block_size, layers, **fields)
