"""Command lines of the train and prepare-data commands, and the checks that run before any work (model build, data
load, download, launch)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.config import ATTN_RES_MODES
from ..utils.flags import flag, trust_flag
from ..utils.flags import seed as seed_flag
from ..utils.refusals import below, combined, needs
from . import SetupError  # noqa: F401  (defined once for the package; importers take it from here too)
from .corpora import DEFAULT_CACHE, OFFLINE_CORPORA, check_input_file
from .fsdp2 import check_fsdp_launch
from .models import FAMILIES, PRESETS, check_init_from
from .recipe import CLIP_GROUPS, rate_problems
from .recipe import DEFAULTS as RECIPE_DEFAULTS

ZERO_STAGES = (0, 1, 2, 3)

# The flags that decide a run's trajectory, with their defaults. They parse to None when left out, so a resume can
# tell a flag given (it must match the recorded run) from one left out (it takes the recorded value). Flags left out
# of this table (logging, evaluation, checkpoint cadence, gradient checkpointing, the non-finite guard) change nothing
# the model learns and may differ between the segments of a run.
RUN_SETTINGS = {
    "data": Path("data/packed"), "model_size": None, "family": None, "config": None, "init_from": None,
    "attn_res": None,
    "block_size": None, "seq_len": None, "max_steps": 2000, "micro_batch_size": 8, "grad_accum": 1,
    **RECIPE_DEFAULTS,  # lr, res_proj_lr, res_proj_weight_decay, min_lr_ratio, warmup_steps, weight_decay, grad_clip,
    # attn_res_lr_multiplier, grad_clip_groups
    "mixed_precision": "auto", "seed": 0, "deepspeed": None,
}
PATH_SETTINGS = ("data", "config", "init_from", "deepspeed")
# What a run keeps on disk: its final weights only, or also resumable checkpoints (the weights plus the optimizer
# state: AdamW's two moments in fp32, twice the weights again, so a checkpoint is about three times final/'s size)
CHECKPOINT_MODES = ("resumable", "final-only")
CHECKPOINT_DEFAULTS = dict(save_every=500, keep_checkpoints=2)


def given_settings(args) -> dict:
    """The run settings given on the command line (the others are None until `fill_settings`)."""
    return {name: getattr(args, name) for name in RUN_SETTINGS if getattr(args, name) is not None}


def fill_settings(args, recorded: dict | None = None) -> None:
    """Flags left out take the recorded run's value (`recorded`: trainer_state.json's settings), else the default."""
    for name, default in RUN_SETTINGS.items():
        if getattr(args, name) is None:
            value = (recorded or {}).get(name, default)
            setattr(args, name, Path(value) if name in PATH_SETTINGS and value is not None else value)


@dataclass
class TrainArgs:
    """`attnres train`'s flags, one field per flag (hf_attnres/cli/train.py parses them; each field declares its
    flag). The run settings (RUN_SETTINGS) are None until `fill_settings` gives them the recorded or default value, so
    a resume can tell a flag given from one left out. Mutable: the resume and the default output folder fill fields
    in."""

    trust_remote_code: bool = trust_flag("data and model")  # --init-from DIR's own code (an auto_map)
    data: Path | None = flag(
        None, group="data and model", type=Path, help="folder written by scripts/prepare_data.py (default data/packed)")
    attn_res: str | None = flag(
        None, group="data and model", choices=ATTN_RES_MODES,
        help="residual: standard (baseline), block or full AttnRes (default: block, or the --config's mode)")
    block_size: int | None = flag(
        None, group="data and model", type=int, help="decoder layers per block in block mode (default: the preset's)")
    model_size: str | None = flag(
        None, group="data and model", choices=list(PRESETS), help="size preset (default small)")
    family: str | None = flag(
        None, group="data and model", choices=FAMILIES,
        help="from scratch: the decoder family the preset is built in (default llama; k3-small is "
             "kimi_linear's only); --init-from and --config name their own")
    config: Path | None = flag(
        None, group="data and model", type=Path, help="model config JSON (replaces --model-size)")
    init_from: Path | None = flag(
        None, group="data and model", type=Path, metavar="DIR",
        help="fine-tune: model and tokenizer from DIR (anything from_pretrained reads, of any family: "
             "final/, Moonshot's layout, an upcycled checkpoint, or a family's own standard one such as "
             "a plain Llama, trained with its standard residual), fresh optimizer and schedule; its "
             "AttnRes mode is kept unless --attn-res/--block-size change it (not with --config/"
             "--model-size/--family)")
    seq_len: int | None = flag(
        None, group="data and model", type=int, help="train on the first N tokens of each sequence (default: all)")
    max_steps: int | None = flag(None, group="optimization", type=int, help="optimizer steps (default 2000)")
    micro_batch_size: int | None = flag(
        None, group="optimization", type=int, help="sequences per process per forward (default 8)")
    grad_accum: int | None = flag(
        None, group="optimization", type=int, help="micro-batches per optimizer step (default 1)")
    lr: float | None = flag(
        None, group="optimization", type=float,
        help="peak learning rate (default 3e-4); every parameter group's, --res-proj-lr and --lr x "
             "--attn-res-lr-multiplier included, must lie in [1e-12, 1]")
    res_proj_lr: float | None = flag(
        None, group="optimization", type=float,
        help="peak learning rate of the AttnRes pseudo-queries (*_res_proj); default: --lr")
    res_proj_weight_decay: float | None = flag(
        None, group="optimization", type=float,
        help="AdamW weight decay of the pseudo-queries (default 0, the paper's recipe: decay pulls them "
             "towards the uniform mix)")
    min_lr_ratio: float | None = flag(
        None, group="optimization", type=float, help="cosine floor as a fraction of the peak (default 0.1)")
    warmup_steps: int | None = flag(None, group="optimization", type=int, help="linear warmup steps (default 100)")
    weight_decay: float | None = flag(
        None, group="optimization", type=float, help="AdamW weight decay on matrices (default 0.1)")
    attn_res_lr_multiplier: float | None = flag(
        None, group="optimization", type=float, metavar="M",
        help="the depth parameters' peak LR as a multiple of --lr: the AttnRes pseudo-queries (*_res_proj; "
             "--res-proj-lr still sets theirs outright) and the keys' norm gains (*_res_norm) (default 1)")
    grad_clip: float | None = flag(
        None, group="optimization", type=float, help="gradient norm clip, 0 = off (default 1.0)")
    grad_clip_groups: str | None = flag(
        None, group="optimization", choices=CLIP_GROUPS,
        help="global: one L2 norm over every parameter; per-group: backbone, pseudo-queries and key norms "
             "each clipped by its own norm, so the queries' gradient never shrinks the backbone's update "
             "(not with --deepspeed or FSDP2) (default global; docs/TRAINING.md)")
    mixed_precision: str | None = flag(
        None, group="optimization", choices=("auto", "no", "bf16"),
        help="auto: bf16 on a GPU that supports it, fp32 elsewhere (default auto)")
    gradient_checkpointing: bool = flag(
        False, group="optimization", action="store_true", help="recompute layer activations in backward")
    seed: int | None = flag(None, group="optimization", type=seed_flag, help="model init and data order (default 0)")
    max_nonfinite_steps: int = flag(
        3, group="optimization", type=int,
        help="a step with a NaN/inf loss or gradient norm makes no update and is logged; this many in a row "
             "stop the run with exit code 3 and no final model (default 3)")
    deepspeed: Path | None = flag(
        None, group="parallelism", type=Path,
        help="DeepSpeed JSON config (configs/deepspeed/zero*.json); launch with torchrun or deepspeed")
    # the deepspeed launcher appends --local_rank=N (torchrun and accelerate use the LOCAL_RANK variable instead)
    local_rank: int | None = flag(
        None, names=("--local_rank", "--local-rank"), group="parallelism", type=int, help=argparse.SUPPRESS)
    output_dir: Path | None = flag(
        None, group="checkpoints and logs", type=Path, help="run folder (default runs/<model-size>-<attn-res>)")
    checkpoints: str | None = flag(
        None, group="checkpoints and logs", choices=CHECKPOINT_MODES,
        help="resumable: checkpoints/step-N/ (the weights plus the optimizer state, about 3x final/'s "
             "size each) so a stopped run continues with --resume; final-only: final/ alone. Default: "
             "final-only with --init-from (a fine-tune's result is its weights) unless --save-every or "
             "--keep-checkpoints is given or the run resumes; resumable from scratch. The run prints "
             "what it writes, where, and how big")
    save_every: int | None = flag(
        None, group="checkpoints and logs", type=int,
        help="checkpoint every N steps, 0 = only at the end (default 500; asks for --checkpoints "
             "resumable)")
    keep_checkpoints: int | None = flag(
        None, group="checkpoints and logs", type=int,
        help="checkpoints kept (default 2; asks for --checkpoints resumable)")
    resume: str = flag(
        "auto", group="checkpoints and logs",
        help="'auto' (latest checkpoint in --output-dir, if any), 'never' or a checkpoint folder "
             "(checkpoints/step-00000100; checkpoints/step-100 also works). A resume continues exactly the "
             "recorded run: flags left out take the recorded values, a flag that would change the run (data, "
             "model, --lr, --max-steps, ...: RUN_SETTINGS in hf_attnres/training/args.py) is refused by name")
    log_every: int = flag(10, group="checkpoints and logs", type=int, help="log train loss every N steps (default 10)")
    eval_every: int = flag(
        200, group="checkpoints and logs", type=int, help="validation loss every N steps, 0 = off (default 200)")
    eval_batches: int = flag(
        10, group="checkpoints and logs", type=int, help="validation global batches per eval (default 10)")
    diagnostics_every: int = flag(
        100, group="checkpoints and logs", type=int,
        help="depth diagnostics (layer RMS, grad norms, AttnRes weights) every N steps, 0 = off "
             "(default 100)")
    no_tensorboard: bool = flag(False, group="checkpoints and logs", action="store_true", help="JSONL log only")
    no_final_model: bool = flag(
        False, group="checkpoints and logs", action="store_true", help="skip saving the final HF-format model")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """Flags another flag makes meaningless, refused by name before any work (`given`: the flags on the command
        line). The rules that need the resolved model (--block-size, --res-proj-* against the model's mode, from
        --config or --init-from too) are `check_mode_flags` in hf_attnres/training/loop.py."""
        final_only = "--checkpoints final-only"
        max_steps = self.max_steps if self.max_steps is not None else RUN_SETTINGS["max_steps"]
        return [
            needs(given, ("trust_remote_code",), "--init-from", "it allows the --init-from folder's code")
            if self.init_from is None else None,
            combined(given, ("save_every", "keep_checkpoints"), final_only, "it writes no checkpoint")
            if self.checkpoints == "final-only" else None,
            combined(given, ("no_final_model",), final_only, "the run would keep no model at all")
            if self.checkpoints == "final-only" else None,
            combined(given, ("grad_clip_groups",), "--grad-clip 0", "clipping is off, in every group")
            if self.grad_clip_groups == "per-group" and self.grad_clip == 0 else None,
            combined(given, ("eval_batches",), "--eval-every 0", "no validation runs")
            if self.eval_every == 0 else None,
            combined(given, ("diagnostics_every",), f"--max-steps {max_steps}",
                     "no step of the run reaches it, so nothing would be recorded (0 turns diagnostics off)")
            if self.diagnostics_every > max_steps else None,
        ]

    def resolve_checkpoints(self, resuming: bool) -> None:
        """What the run keeps: `--checkpoints` as given, else final weights only for a fine-tune (`--init-from`: the
        tuned weights are the result, and a checkpoint's optimizer state would triple the disk a short fine-tune
        uses) unless --save-every / --keep-checkpoints ask for checkpoints or the run resumes from one; resumable
        checkpoints from scratch, where a long run must survive a stop. Then the checkpoint flags' defaults."""
        if self.checkpoints is None:
            asked = self.save_every is not None or self.keep_checkpoints is not None
            self.checkpoints = "final-only" if self.init_from is not None and not asked and not resuming \
                else "resumable"
        for name, default in CHECKPOINT_DEFAULTS.items():
            if getattr(self, name) is None:
                setattr(self, name, default)

    def copy(self) -> TrainArgs:
        return dataclasses.replace(self)

    def problems(self, meta: dict | None, world: int) -> list[str]:
        """One line per flag whose setting cannot work (an empty list: every flag can); `meta` is the prepared dataset's
        meta.json, None where the data could not be read (the checks against it are then left out)."""
        problems = []

        def check(test) -> None:
            try:
                test()
            except ValueError as error:
                problems.append(str(error))

        # argparse's float() accepts 'nan' and 'inf': no flag of ours means either
        for name, value in vars(self).items():
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"--{name.replace('_', '-')} must be a finite number, got {value}")
        if self.output_dir is not None and self.output_dir.exists() and not self.output_dir.is_dir():
            problems.append(f"--output-dir {self.output_dir} is a file, not a folder")
        positive = ("max_steps", "micro_batch_size", "grad_accum", "log_every", "keep_checkpoints", "eval_batches",
                    "max_nonfinite_steps")
        problems += below(self, positive, 1)
        problems += below(self, ("save_every", "eval_every", "diagnostics_every", "warmup_steps", "weight_decay",
                                 "res_proj_weight_decay", "grad_clip"), 0)
        if self.warmup_steps > self.max_steps >= 1:
            problems.append(f"--warmup-steps {self.warmup_steps} exceeds --max-steps {self.max_steps}")
        for name in ("lr", "res_proj_lr", "attn_res_lr_multiplier"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                problems.append(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        problems += rate_problems(self)
        if self.checkpoints == "final-only" and self.no_final_model:
            problems.append("--no-final-model with --init-from keeps no model at all (a fine-tune writes final "
                            "weights only unless asked): add --checkpoints resumable, or drop --no-final-model")
        if not 0 <= self.min_lr_ratio <= 1:
            problems.append(f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.block_size is not None and self.block_size < 1:
            problems.append(f"--block-size must be >= 1, got {self.block_size}")
        check(lambda: check_init_from(self))
        if self.config is not None and not self.config.is_file():
            problems.append(f"--config {self.config}: file not found")
        per_group = self.grad_clip_groups == "per-group"
        if per_group and self.deepspeed is not None:
            problems.append("--grad-clip-groups per-group cannot be combined with --deepspeed: DeepSpeed clips the "
                            "global norm inside its own step")
        if meta is not None:
            if self.seq_len is not None and not 2 <= self.seq_len <= meta["seq_len"]:
                problems.append(f"--seq-len must be in [2, {meta['seq_len']}] (the prepared sequence length), "
                                f"got {self.seq_len}")
            global_batch = self.micro_batch_size * self.grad_accum * world
            n_train, n_val = meta["num_sequences"]["train"], meta["num_sequences"]["validation"]
            if global_batch > n_train:
                problems.append(
                    f"global batch {global_batch} (--micro-batch-size {self.micro_batch_size} x --grad-accum "
                    f"{self.grad_accum} x {world} processes) exceeds the {n_train} training sequences in {self.data}")
            if self.eval_every and 0 < global_batch > n_val:
                problems.append(f"validation has {n_val} sequences, fewer than one global batch ({global_batch}); "
                                f"lower --micro-batch-size / --grad-accum or set --eval-every 0")
        check(lambda: check_fsdp_launch(self.deepspeed))
        if per_group:
            from .fsdp2 import fsdp_launch

            if fsdp_launch():
                problems.append("--grad-clip-groups per-group cannot be combined with an FSDP2 launch: the gradients "
                                "are sharded (use global)")
        if self.deepspeed is not None:
            check(lambda: check_deepspeed(load_deepspeed_config(self.deepspeed), self, world))
        return problems


def world_size() -> int:
    """Processes of this launch (torchrun / accelerate / deepspeed all set WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def load_deepspeed_config(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"--deepspeed {path}: file not found")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"--deepspeed {path}: not valid JSON ({error})") from error
    stage = config.get("zero_optimization", {}).get("stage", 0)
    if stage not in ZERO_STAGES:
        raise ValueError(f"--deepspeed {path}: zero_optimization.stage must be one of {ZERO_STAGES}, got {stage!r}")
    return config


def check_finite_flags(args) -> None:
    """argparse's float() accepts 'nan' and 'inf': no flag of ours means either (a NaN learning rate trains NaNs)."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number, got {value}")


def check_deepspeed(config: dict, args, world: int) -> None:
    """The batch fields a DeepSpeed config may pin must agree with the command line ('auto' is filled in)."""
    expected = {
        "train_micro_batch_size_per_gpu": args.micro_batch_size,
        "gradient_accumulation_steps": args.grad_accum,
        "train_batch_size": args.micro_batch_size * args.grad_accum * world,
    }
    for key, value in expected.items():
        if config.get(key, "auto") not in ("auto", value):
            raise ValueError(f"--deepspeed {args.deepspeed}: {key} is {config[key]} "
                             f"but the command line gives {value}; set it to \"auto\" or match the flags")
    if "optimizer" in config or "scheduler" in config:
        raise ValueError(f"--deepspeed {args.deepspeed}: remove 'optimizer'/'scheduler': train.py passes its own AdamW "
                         f"and warmup+cosine schedule (the same as without DeepSpeed)")


# --- prepare-data ------------------------------------------------------------------------------------------------


# The largest --vocab-size a trained BPE may ask for: 4x the largest vocabularies in use (~256K). The tokenizers
# trainer allocates for the whole vocabulary before reading a word: 10**12 aborts the interpreter (Rust OOM).
MAX_BPE_VOCAB = 2**20


@dataclass
class PrepareArgs:
    """`attnres prepare-data`'s flags, one field per flag (`hf_attnres.cli.prepare_data` builds its parser
    from them); the main job builds one directly."""

    trust_remote_code: bool = trust_flag()  # --tokenizer DIR's own code (an auto_map)
    # the text's source, one of three (none: the offline corpora)
    files: list[Path] | None = flag(
        None, exclusive="source", nargs="+", type=Path, help="local .txt / .jsonl / .json files")
    hub: str | None = flag(None, exclusive="source", metavar="NAME", help="Hugging Face Hub dataset name (online only)")
    chat: list[Path] | None = flag(
        None, exclusive="source", nargs="+", type=Path, metavar="F",
        help="instruction data: .jsonl files of chat (messages) or prompt/completion records")
    chat_template: Path | None = flag(
        None, type=Path, help="Jinja chat template file for --chat (default: the tokenizer's, else attnres' default)")
    hub_config: str | None = flag(None, help="Hub dataset config name")
    hub_split: str = flag("train", help="Hub split to read (default: train)")
    text_column: str = flag("text", help="column holding the text (default: text)")
    corpora: list[str] = flag(
        factory=lambda: list(OFFLINE_CORPORA), nargs="+", choices=list(OFFLINE_CORPORA),
        help="offline corpora to include (default: all)")
    tokenizer: str = flag("gpt2", help="'gpt2' (default), 'bpe' (train one) or a tokenizer folder")
    vocab_size: int = flag(8192, type=int, help="vocabulary of a trained BPE (default 8192)")
    seq_len: int = flag(512, type=int, help="tokens per packed sequence (default 512)")
    validation_fraction: float = flag(0.01, type=float, help="documents held out (default 0.01)")
    seed: int = flag(0, type=seed_flag, help="seed of the train/validation split")
    output_dir: Path = flag(Path("data/packed"), type=Path, help="output folder (default data/packed)")
    force: bool = flag(
        False, action="store_true",
        help="replace --output-dir if it exists (never a folder "
             "holding the input files)")
    cache_dir: Path = flag(DEFAULT_CACHE, type=Path, help=f"PyPI download cache (default {DEFAULT_CACHE})")
    num_proc: int | None = flag(None, type=int, help="processes for tokenization (default: 1)")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """Flags another flag makes meaningless, refused by name before any work (`given`: the flags on the command
        line): the Hub's config and split without --hub, a vocabulary size for a tokenizer not trained here, the
        offline corpora with another source, a text column of the offline corpora."""
        source = "--files" if self.files else "--hub" if self.hub else "--chat" if self.chat else None
        return [
            needs(given, ("hub_config", "hub_split"), "--hub", "they pick the Hub dataset's config and split")
            if self.hub is None else None,
            combined(given, ("vocab_size",), f"--tokenizer {self.tokenizer}",
                     "only a BPE trained here (--tokenizer bpe) takes a vocabulary size")
            if self.tokenizer != "bpe" else None,
            combined(given, ("corpora",), source, "the offline corpora are read only when no other source is given")
            if source is not None else
            needs(given, ("text_column",), "--files or --hub", "the offline corpora have no columns"),
        ]


def check_prepare_args(args: PrepareArgs) -> None:
    """prepare-data's flags: clear errors (SystemExit "error: ...") before any download or tokenization."""
    if args.seq_len < 2:
        raise SystemExit(f"error: --seq-len must be >= 2, got {args.seq_len}")
    if not 0 < args.validation_fraction < 1:
        raise SystemExit(f"error: --validation-fraction must be in (0, 1), got {args.validation_fraction}")
    if args.tokenizer == "bpe" and not 257 <= args.vocab_size <= MAX_BPE_VOCAB:
        raise SystemExit(f"error: --vocab-size must be in [257, {MAX_BPE_VOCAB:,}] (256 bytes + EOS at least; the BPE "
                         f"trainer reserves memory for the whole vocabulary up front), got {args.vocab_size}")
    if args.tokenizer not in ("gpt2", "bpe") and not Path(args.tokenizer).is_dir():
        raise SystemExit(f"error: --tokenizer {args.tokenizer!r} is neither 'gpt2', 'bpe' nor a tokenizer folder")
    for path in args.chat or ():
        if not path.is_file() or path.suffix != ".jsonl":
            raise SystemExit(f"error: --chat: {path} is not an existing .jsonl file")
    if args.chat_template is not None and (args.chat is None or not args.chat_template.is_file()):
        raise SystemExit(f"error: --chat-template {args.chat_template}: needs --chat and an existing file")
    from ..utils.safe_paths import UnsafeOutputError, check_output_folder

    inputs = [*(args.files or ()), *(args.chat or ()), *([args.tokenizer] if Path(args.tokenizer).is_dir() else []),
              *([args.cache_dir] if args.cache_dir.exists() else [])]
    try:
        for path in args.files or ():
            check_input_file(path, args.text_column)
        check_output_folder(args.output_dir, inputs, args.force, "--output-dir")
    except (ValueError, UnsafeOutputError) as error:
        raise SystemExit(f"error: {error}") from None
