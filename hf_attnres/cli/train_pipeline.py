"""Train an AttnRes model of any family with DeepSpeed pipeline parallelism (1F1B schedule, ZeRO stage 0 or 1).

The model is cut into pipeline stages along its decoder layers; between stages travel the depth sources (standard: the
hidden state; block: embedding + completed blocks + partial sum; full: every sub-layer output), and their gradients
travel back. Each step runs DeepSpeed's `train_batch` over --grad-accum micro-batches per data-parallel replica.

Launch with torchrun or the deepspeed launcher; the number of processes must be a multiple of --num-stages (the
quotient is the data-parallel degree). --model is a save_pretrained folder of any AttnRes family (an upcycled Llama,
Qwen, Mistral, Gemma 3, Phi-3 or Kimi Linear; a family's plain checkpoint is refused: upcycle it first). With no
arguments (under a 2-process launcher) it trains a tiny random block AttnRes model of --family (default Llama) on
synthetic tokens.

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

from ..pipeline.args import PipelineArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(PipelineArgs, __doc__)


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
