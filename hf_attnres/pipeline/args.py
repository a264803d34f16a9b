"""The flags of the two pipeline trainers (`train-pipeline`, `train-interleaved`) as dataclasses, one field per flag
(the parsers in hf_attnres/cli build them; a test holds fields and flags equal), with the rules that refuse a flag
another one makes meaningless declared beside the fields."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..training.recipe import DEFAULTS as RECIPE_DEFAULTS
from ..training.recipe import Recipe
from ..utils.refusals import below, combined, needs


@dataclass
class PipelineModelArgs:
    """The model, data, recipe and run flags both pipeline trainers take."""

    model: Path | None = None
    trust_remote_code: bool = False
    mode: str = "block"
    block_size: int = 2
    layers: int = 5
    data: Path | None = None
    seq_len: int = 32
    micro_batch_size: int = 2
    grad_accum: int = 2
    steps: int = 4
    lr: float = 1e-3
    res_proj_lr: float | None = None
    res_proj_weight_decay: float = RECIPE_DEFAULTS["res_proj_weight_decay"]
    weight_decay: float = RECIPE_DEFAULTS["weight_decay"]
    warmup_steps: int = 0
    min_lr_ratio: float = RECIPE_DEFAULTS["min_lr_ratio"]
    grad_clip: float = RECIPE_DEFAULTS["grad_clip"]
    seed: int = 0
    max_nonfinite_steps: int = 3
    output_dir: Path = Path("runs/pipeline")
    no_save: bool = False
    save_every: int = 0
    keep_checkpoints: int = 2
    resume: str = "auto"

    def count_error(self, *more: str) -> str | None:
        """The first count flag out of range, as one line: these and `more` must be >= 1, --save-every >= 0 (0: no
        periodic checkpoints)."""
        lines = below(self, ("micro_batch_size", "grad_accum", "steps", "seq_len", "max_nonfinite_steps",
                             "keep_checkpoints", *more), 1) + below(self, ("save_every",), 0)
        return f"error: {lines[0]}" if lines else None

    def signature(self, config, world: int) -> dict:
        """What a checkpoint records of its run (a resume must match it): the model, data, batch plan, recipe and
        the trainer's layout over the `world` processes."""
        return dict(attn_res=config.attn_res_mode, block_size=config.attn_res_block_size,
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
            shape = combined(given, ("mode", "block_size", "layers"), f"--model {self.model}",
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

    num_stages: int | None = None
    partition_method: str = "type:DecoderLayerPipe"
    optimizer: str = "adamw"
    zero_stage: int = 1
    bf16: bool = False
    activation_checkpoint_interval: int = 0
    cpu_shm_comm: bool = False
    report_comms: bool = False

    def layout(self, world: int) -> dict:
        return dict(stages=self.num_stages or world, processes=world, partition_method=self.partition_method,
                    optimizer=self.optimizer, zero_stage=self.zero_stage, bf16=self.bf16)


@dataclass
class InterleavedArgs(PipelineModelArgs):
    """`train-interleaved`: PyTorch's interleaved 1F1B with cross-stage caching, checkpoints and resume."""

    block_size: int = 3
    layers: int = 8
    output_dir: Path = Path("runs/interleaved")
    virtual_stages: int = 2
    no_caching: bool = False

    def layout(self, world: int) -> dict:
        return dict(stages=world, virtual_stages=self.virtual_stages)
