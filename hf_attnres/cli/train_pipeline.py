"""Train an AttnRes model of any family with DeepSpeed pipeline parallelism (1F1B schedule, ZeRO stage 0 or 1).

The model is cut into pipeline stages along its decoder layers; between stages travel the depth sources (standard: the
hidden state; block: embedding + completed blocks + partial sum; full: every sub-layer output), and their gradients
travel back. Each step runs DeepSpeed's `train_batch` over --grad-accum micro-batches per data-parallel replica.

Launch with torchrun or the deepspeed launcher; the number of processes must be a multiple of --num-stages (the
quotient is the data-parallel degree). --model is a save_pretrained folder of any AttnRes family (an upcycled Llama,
Qwen, Mistral, Gemma 3, Phi-3 or Kimi Linear; a family's plain checkpoint trains in standard mode). With no arguments
(under a 2-process launcher) it trains a tiny random Kimi Linear block AttnRes model on synthetic tokens.

CPU (gloo; DS_ACCELERATOR=cpu is set for you when no GPU is visible):
  torchrun --nproc_per_node 2 -m hf_attnres.cli.train_pipeline
  torchrun --nproc_per_node 2 -m hf_attnres.cli.train_pipeline --mode full --steps 20 --output-dir runs/pipe-full
GPU (NCCL), 4 stages x 2 data-parallel replicas on 8 GPUs, bf16, a prepared dataset and a checkpoint:
  deepspeed --num_gpus 8 --module hf_attnres.cli.train_pipeline --num-stages 4 --model path/to/checkpoint \\
      --data data/packed --micro-batch-size 4 --grad-accum 16 --bf16 --steps 1000 --output-dir runs/pp4

Outputs (--output-dir): log.jsonl (loss per step), comms.json (bytes per stage boundary against the minimum, with
--report-comms), with --save-every N checkpoints/step-N/ (DeepSpeed's files; --resume auto continues from the
latest), and the trained model as a Hugging Face folder `model/` (one safetensors shard per stage, the code
files and the tokenizer of --data or --model: loads with
AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True) and AutoTokenizer, like a save_pretrained folder).
Pipeline parallelism combines with ZeRO-1 at most (DeepSpeed refuses ZeRO-2/3 with pipelines). Batches must be packed,
unpadded sequences (the stages rebuild causal masks themselves).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..pipeline.args import PipelineArgs
from ..training.recipe import add_recipe_args
from ..utils.flags import seed as seed_flag
from ..utils.trust import add_trust_flag
from . import command_main
from .combos import refuse_conflicts


def add_model_and_data_args(parser: argparse.ArgumentParser, block_size: int, layers: int) -> None:
    """The model and data flags both pipeline trainers take (`train-pipeline`, `train-interleaved`)."""
    model = parser.add_argument_group("model")
    model.add_argument("--model", type=Path, help="a save_pretrained folder; default: a tiny random model")
    add_trust_flag(model)  # --model DIR's own tokenizer code: off unless asked
    model.add_argument("--mode", choices=["standard", "block", "full"], default="block",
                       help="tiny model's AttnRes mode")
    model.add_argument("--block-size", type=int, default=block_size,
                       help="tiny model's layers per block (block mode)")
    model.add_argument("--layers", type=int, default=layers, help="tiny model's decoder layers")
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path, help="folder written by scripts/prepare_data.py; default: synthetic tokens")
    data.add_argument("--seq-len", type=int, default=32, help="tokens per synthetic sequence (--data: its own length)")


def add_checkpoint_args(out, save_every_help: str) -> None:
    """Checkpoints and resume, as both pipeline trainers take them (`hf_attnres.training.checkpoints`)."""
    out.add_argument("--save-every", type=int, default=0, help=save_every_help)
    out.add_argument("--keep-checkpoints", type=int, default=2, help="newest checkpoints kept (default 2)")
    out.add_argument("--resume", default="auto", help="auto (latest checkpoint of --output-dir), never, or a folder; "
                     "a resume must match the checkpoint's run settings")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_and_data_args(parser, block_size=2, layers=5)
    train = parser.add_argument_group("training")
    train.add_argument("--num-stages", type=int, default=None, help="pipeline stages (default: all processes)")
    train.add_argument("--partition-method", default="type:DecoderLayerPipe",
                       help="DeepSpeed partitioning: 'type:DecoderLayerPipe' (balance decoder layers), 'uniform', "
                            "'parameters'")
    train.add_argument("--micro-batch-size", type=int, default=2)
    train.add_argument("--grad-accum", type=int, default=2, help="micro-batches per step per replica (fill the pipe)")
    train.add_argument("--steps", type=int, default=4)
    train.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                       help="adamw: the training recipe (hf_attnres/training/recipe.py); sgd: plain, for tests")
    add_recipe_args(train, lr=1e-3, warmup_steps=0)  # the recipe's flags, as `attnres train` has them
    train.add_argument("--zero-stage", type=int, choices=[0, 1], default=1)
    train.add_argument("--bf16", action="store_true", help="bf16 weights/activations (DeepSpeed bf16 optimizer)")
    train.add_argument("--activation-checkpoint-interval", type=int, default=0, help="decoder layers per checkpoint")
    train.add_argument("--seed", type=seed_flag, default=0)
    train.add_argument("--max-nonfinite-steps", type=int, default=3,
                       help="a step with a NaN/inf loss or gradient makes no update and is logged; this many in a row "
                            "stop the run with exit code 3 and no saved model (default 3)")
    train.add_argument("--cpu-shm-comm", action="store_true",
                       help="CPU only: let DeepSpeed build its shared-memory allreduce op (faster data-parallel "
                            "allreduce; a one-off C++ build of minutes)")
    out = parser.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, default=Path("runs/pipeline"))
    out.add_argument("--report-comms", action="store_true", help="count bytes per stage boundary -> comms.json")
    add_checkpoint_args(out, "checkpoint every N steps and at the end (checkpoints/step-N/: DeepSpeed's files); "
                        "default 0: no checkpoints")
    out.add_argument("--no-save", action="store_true", help="skip writing the trained model")
    return parser


def main(argv=None) -> None:
    """Parse the flags and run this process's part of the pipeline training (`hf_attnres.pipeline.train`)."""
    parser = build_parser()
    args = PipelineArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..pipeline.train import train_pipeline  # DeepSpeed (the `train` extra): imported only to train

    train_pipeline(args)


def run():
    sys.exit(command_main("train-pipeline"))


if __name__ == "__main__":  # `torchrun --nproc_per_node 2 -m hf_attnres.cli.train_pipeline ...`
    run()
