"""A continued-training grid (configs/study/continued-*.json): the study grid of hf_attnres/study/grid.py, started from
a pretrained checkpoint instead of a random Kimi Linear model.

    {"name": "continued-cpu",
     "source": "smollm2",                         # the cached SmolLM2-135M-Instruct, or a model folder
     "data": {"dir": "data/continued-smollm2-s128", "prepare": ["--seq-len", "128"]},
     "train": {"max_steps": 18, "micro_batch_size": 4, "seq_len": 128, "warmup_steps": 2},
     "continued": {"device": "cpu", "block_size": null, "frozen_arms": ["frozen"], ...},
     "arms": {"frozen": {"mode": "block"}},
     "groups": {"lr_sweep": {"arms": [...], "lrs": {"standard": [...], ...}, "seeds": [0]},
                "tuned": {"arms": [...], "seeds": [0, 1]}},
     "lm_eval": {"tasks": ["attnres_mmlu_cloze"], "limit": 2, "eval_data": "data/eval"}}

Arms: "standard" is the source model itself with its standard residual (arm a); "block" and "full" are the source
upcycled (`hf_attnres.upcycle`) to Block AttnRes (continued.block_size, default about 8 blocks) and Full AttnRes; an arm
named in continued.frozen_arms trains only the new pseudo-queries and key norms, the backbone frozen. The data are
prepared (`attnres prepare-data`) with the source's own tokenizer; "model" is read from the source's config (layers,
width, heads: the run ids), so a grid file gives none.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...folders.checkpoint_files import read_json_file
from ...training.recipe import CLIP_GROUPS
from ..grid import Grid, _merged, grid_from_dict, read_grid_json

CONTINUED_DEFAULTS = dict(device="cpu", dtype="float32", block_size=None, frozen_arms=[], weight_decay=0.0,
                          min_lr_ratio=0.1, grad_clip=1.0, grad_clip_groups="global", eval_batch_size=8)
LM_EVAL_DEFAULTS = dict(tasks=[], limit=None, eval_data="data/eval", batch_size=8)
DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "cuda")


@dataclass
class ContinuedGrid:
    grid: Grid  # the runs, ids, sweep and resume rules of the from-scratch study
    source: str
    folder: Path  # the source model folder (weights and tokenizer)
    continued: dict
    lm_eval: dict


def load_continued(path: Path, resolve_source=None) -> ContinuedGrid:
    """Read and check a continued grid; ValueError naming the file and field. `resolve_source(source)` -> the model
    folder (default: source.source_folder, which makes the SmolLM2 cache on first use)."""
    from .source import source_folder

    raw = read_grid_json(path)
    source_name = str(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{source_name}: the grid must be a JSON object")
    raw = dict(raw)

    def fail(message):
        raise ValueError(f"{source_name}: {message}")

    source = raw.pop("source", None)
    if not isinstance(source, str) or not source:
        fail("'source' is required: 'smollm2' or a model folder")
    if "model" in raw:
        fail("'model' is read from the source's config: give continued.block_size instead")
    continued = _merged(raw.pop("continued", {}), CONTINUED_DEFAULTS, "continued", fail)
    lm_eval = _merged(raw.pop("lm_eval", {}), LM_EVAL_DEFAULTS, "lm_eval", fail)
    check_continued(continued, raw.get("arms", {}), fail)
    check_lm_eval(lm_eval, fail)
    folder = (resolve_source or source_folder)(source)
    config = read_json_file(Path(folder) / "config.json", "config.json")
    check_source(config, source, raw.get("train", {}), fail)
    layers, hidden, heads = (config.get(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads"))
    from ...families.upcycle import default_block_size

    block_size = continued["block_size"] or default_block_size(layers)
    raw["model"] = dict(layers=layers, hidden=hidden, heads=heads, block_size=block_size)
    grid = grid_from_dict(raw, source_name)
    for arm, a in grid.arms.items():
        warmup = a["train"].get("warmup_steps", grid.train["warmup_steps"])
        if warmup > grid.train["max_steps"]:
            where = f"arms.{arm}.train.warmup_steps" if "warmup_steps" in a["train"] else "train.warmup_steps"
            fail(f"{where} ({warmup}) exceeds train.max_steps ({grid.train['max_steps']})")
    # a run's record matches its settings (runner.run_spec reads grid.train): the continued ones and the source too
    grid.train["continued"] = dict(continued, source=source)
    return ContinuedGrid(grid, source, Path(folder), continued, lm_eval)


def check_source(config: dict, source: str, train: dict, fail) -> None:
    """The source must be a family's own standard checkpoint, and the runs' sequences within its positions."""
    if "attn_res_mode" in config or str(config.get("model_type", "")).endswith("_attnres"):
        fail(f"source {source!r} is already an AttnRes model ({config.get('model_type')}, attn_res_mode "
             f"{config.get('attn_res_mode')!r}): the study upcycles a family's own standard checkpoint")
    positions, seq_len = config.get("max_position_embeddings"), train.get("seq_len") if isinstance(train, dict) \
        else None
    if isinstance(positions, int) and isinstance(seq_len, int) and seq_len > positions:
        fail(f"train.seq_len {seq_len} exceeds the source's max_position_embeddings ({positions})")


def check_device(c: dict, fail) -> None:
    """A CUDA grid needs a visible CUDA device (checked where runs train, not where a grid is only listed)."""
    import torch

    if c["device"] == "cuda" and not torch.cuda.is_available():
        fail("continued.device is 'cuda' but no CUDA device is visible here (use a CPU grid such as "
             "configs/study/continued-cpu.json, or run it on a GPU machine)")


def check_continued(c: dict, arms: dict, fail) -> None:
    if c["device"] not in DEVICES:
        fail(f"continued.device must be one of {DEVICES}, got {c['device']!r}")
    if c["dtype"] not in DTYPES:
        fail(f"continued.dtype must be one of {DTYPES}, got {c['dtype']!r}")
    size = c["block_size"]
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        fail(f"continued.block_size must be null (about 8 blocks) or an integer >= 1, got {size!r}")
    frozen = c["frozen_arms"]
    if not isinstance(frozen, list) or any(a not in arms or arms[a].get("mode") == "standard" for a in frozen):
        fail("continued.frozen_arms must list named arms of 'arms' in block or full mode (a frozen standard model "
             f"has nothing to train), got {frozen!r}")
    for name in ("weight_decay", "min_lr_ratio", "grad_clip"):
        if isinstance(c[name], bool) or not isinstance(c[name], (int, float)) or c[name] < 0:
            fail(f"continued.{name} must be a number >= 0, got {c[name]!r}")
    if c["grad_clip_groups"] not in CLIP_GROUPS:
        fail(f"continued.grad_clip_groups must be one of {list(CLIP_GROUPS)}, got {c['grad_clip_groups']!r}")
    if isinstance(c["eval_batch_size"], bool) or not isinstance(c["eval_batch_size"], int) or c["eval_batch_size"] < 1:
        fail(f"continued.eval_batch_size must be an integer >= 1, got {c['eval_batch_size']!r}")


def check_lm_eval(e: dict, fail) -> None:
    if not isinstance(e["tasks"], list) or not all(isinstance(t, str) for t in e["tasks"]):
        fail("lm_eval.tasks must be a list of task names (empty: no lm-eval)")
    if e["limit"] is not None and (isinstance(e["limit"], bool) or not isinstance(e["limit"], int) or e["limit"] < 1):
        fail(f"lm_eval.limit must be null or an integer >= 1, got {e['limit']!r}")
    if not isinstance(e["eval_data"], str):
        fail("lm_eval.eval_data must be the prepare-eval-data folder (a string)")
