"""The flags of the two pipeline trainers (`train-pipeline`, `train-interleaved`) as dataclasses, one field per flag
(the parsers in hf_attnres/cli are built from them, `utils.flags.parser_for`), with the rules that refuse a flag
another one makes meaningless declared beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..families.registry import SUPPORTED
from ..training.recipe import DEFAULTS as RECIPE_DEFAULTS
from ..training.recipe import Recipe
from ..utils.flags import flag, trust_flag
from ..utils.flags import seed as seed_flag
from ..utils.refusals import below, combined, needs


@dataclass
class PipelineModelArgs:
    """The model, data, recipe and run flags both pipeline trainers take."""

    model: Path | None = flag(
        None, group="model", type=Path, help="a save_pretrained folder; default: a tiny random model")
    trust_remote_code: bool = trust_flag("model")  # --model DIR's own tokenizer code: off unless asked
    family: str = flag("llama", group="model", choices=sorted(SUPPORTED),
                       help="tiny model's decoder family (default llama)")
    mode: str = flag("block", group="model", choices=["standard", "block", "full"], help="tiny model's AttnRes mode")
    block_size: int = flag(2, group="model", type=int, help="tiny model's layers per block (block mode)")
    layers: int = flag(5, group="model", type=int, help="tiny model's decoder layers")
    data: Path | None = flag(
        None, group="data", type=Path, help="folder written by scripts/prepare_data.py; default: synthetic tokens")
    seq_len: int = flag(32, group="data", type=int, help="tokens per synthetic sequence (--data: its own length)")
    micro_batch_size: int = flag(2, group="training", type=int)
    grad_accum: int = flag(2, group="training", type=int, help="micro-batches per step (fill the pipe)")
    steps: int = flag(4, group="training", type=int)
    # the training recipe's flags (hf_attnres/training/recipe.py), with `attnres train`'s meaning and the pipeline
    # commands' own LR and warmup defaults: their default runs are a few steps of a tiny model
    lr: float = flag(1e-3, group="training", type=float, help="peak learning rate (default 0.001)")
    res_proj_lr: float | None = flag(
        None, group="training", type=float,
        help="peak learning rate of the AttnRes pseudo-queries (*_res_proj); default: --lr")
    res_proj_weight_decay: float = flag(
        RECIPE_DEFAULTS["res_proj_weight_decay"], group="training", type=float,
        help="weight decay of the pseudo-queries (default 0)")
    weight_decay: float = flag(
        RECIPE_DEFAULTS["weight_decay"], group="training", type=float,
        help=f"AdamW weight decay on matrices; norms, biases, embeddings and pseudo-queries get none "
             f"(default {RECIPE_DEFAULTS['weight_decay']})")
    warmup_steps: int = flag(0, group="training", type=int, help="linear warmup steps (default 0)")
    min_lr_ratio: float = flag(
        RECIPE_DEFAULTS["min_lr_ratio"], group="training", type=float,
        help=f"cosine floor as a fraction of the peak (default {RECIPE_DEFAULTS['min_lr_ratio']})")
    grad_clip: float = flag(
        RECIPE_DEFAULTS["grad_clip"], group="training", type=float,
        help=f"global gradient norm clip, 0 = off (default {RECIPE_DEFAULTS['grad_clip']})")
    seed: int = flag(0, group="training", type=seed_flag)
    max_nonfinite_steps: int = flag(
        3, group="training", type=int,
        help="a step with a NaN/inf loss or gradient makes no update and is logged; this many in a row stop the run "
             "with exit code 3 and no saved model (default 3)")
    output_dir: Path = flag(Path("runs/pipeline"), group="output", type=Path)
    no_save: bool = flag(False, group="output", action="store_true", help="skip writing the trained model")
    # checkpoints and resume (hf_attnres.training.checkpoints)
    save_every: int = flag(0, group="output", type=int, help="checkpoint every N steps (and at the end)")
    keep_checkpoints: int = flag(2, group="output", type=int, help="newest checkpoints kept (default 2)")
    resume: str = flag(
        "auto", group="output",
        help="auto (latest checkpoint of --output-dir), never, or a folder; a "
             "resume must match the checkpoint's run settings")

    def count_error(self, *more: str) -> str | None:
        """The first count flag out of range, as one line: these and `more` must be >= 1, --save-every >= 0 (0: no
        periodic checkpoints)."""
        lines = below(self, ("micro_batch_size", "grad_accum", "steps", "seq_len", "max_nonfinite_steps",
                             "keep_checkpoints", *more), 1) + below(self, ("save_every",), 0)
        return f"error: {lines[0]}" if lines else None

    def signature(self, config, world: int) -> dict:
        """What a checkpoint records of its run (a resume must match it): the model, data, batch plan, recipe and
        the trainer's layout over the `world` processes."""
        return dict(family=config.model_type, attn_res=config.attn_res_mode, block_size=config.attn_res_block_size,
                    layers=config.num_hidden_layers, model=str(self.model), data=str(self.data),
                    micro_batch_size=self.micro_batch_size, grad_accum=self.grad_accum, seq_len=self.seq_len,
                    seed=self.seed, recipe=Recipe.from_args(self, max_steps=self.steps).record(),
                    **self.layout(world))

    def layout(self, world: int) -> dict:
        raise NotImplementedError

    def conflicts(self, given: set[str]) -> list[str | None]:
        """The tiny model's flags against --model, --seq-len against --data (`given`: the flags on the command line;
        a flag counts as given whatever its value)."""
        if self.model is not None:
            shape = combined(given, ("family", "mode", "block_size", "layers"), f"--model {self.model}",
                             "the folder's config decides the model (these flags shape the tiny random model only)")
        elif self.mode != "block":
            shape = combined(given, ("block_size",), f"--mode {self.mode}", "blocks exist in block mode only")
        else:
            shape = None
        data = combined(given, ("seq_len",), f"--data {self.data}", "the prepared data's own sequence length is "
                        "used") if self.data is not None else None
        trust = needs(given, ("trust_remote_code",), "--model", "it allows the --model folder's code") \
            if self.model is None else None
        return [shape, data, trust]


@dataclass
class PipelineArgs(PipelineModelArgs):
    """`train-pipeline`: DeepSpeed's 1F1B pipeline (ZeRO 0 or 1)."""

    grad_accum: int = flag(2, group="training", type=int, help="micro-batches per step per replica (fill the pipe)")
    save_every: int = flag(
        0, group="output", type=int,
        help="checkpoint every N steps and at the end (checkpoints/step-N/: DeepSpeed's files); "
             "default 0: no checkpoints")
    num_stages: int | None = flag(None, group="training", type=int, help="pipeline stages (default: all processes)")
    partition_method: str = flag(
        "type:DecoderLayerPipe", group="training",
        help="DeepSpeed partitioning: 'type:DecoderLayerPipe' (balance decoder layers), 'uniform', 'parameters'")
    optimizer: str = flag(
        "adamw", group="training", choices=["adamw", "sgd"],
        help="adamw: the training recipe (hf_attnres/training/recipe.py); sgd: plain, for tests")
    zero_stage: int = flag(1, group="training", type=int, choices=[0, 1])
    bf16: bool = flag(
        False, group="training", action="store_true", help="bf16 weights/activations (DeepSpeed bf16 optimizer)")
    activation_checkpoint_interval: int = flag(0, group="training", type=int, help="decoder layers per checkpoint")
    cpu_shm_comm: bool = flag(
        False, group="training", action="store_true",
        help="CPU only: let DeepSpeed build its shared-memory allreduce op (faster data-parallel "
             "allreduce; a one-off C++ build of minutes)")
    report_comms: bool = flag(
        False, group="output", action="store_true", help="count bytes per stage boundary -> comms.json")

    def layout(self, world: int) -> dict:
        return dict(stages=self.num_stages or world, processes=world, partition_method=self.partition_method,
                    optimizer=self.optimizer, zero_stage=self.zero_stage, bf16=self.bf16)


@dataclass
class InterleavedArgs(PipelineModelArgs):
    """`train-interleaved`: PyTorch's interleaved 1F1B with cross-stage caching, checkpoints and resume."""

    block_size: int = flag(3, group="model", type=int, help="tiny model's layers per block (block mode)")
    layers: int = flag(8, group="model", type=int, help="tiny model's decoder layers")
    output_dir: Path = flag(Path("runs/interleaved"), group="output", type=Path)
    virtual_stages: int = flag(2, group="training", type=int, help="chunks per process V (P = the processes)")
    no_caching: bool = flag(
        False, group="training", action="store_true", help="send every depth source at every transition")

    def layout(self, world: int) -> dict:
        return dict(stages=world, virtual_stages=self.virtual_stages)
