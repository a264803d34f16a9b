#!/usr/bin/env python3
"""Train a KimiLinearAttnRes model with DeepSpeed pipeline parallelism (1F1B schedule, ZeRO stage 0 or 1).

The model is cut into pipeline stages along its decoder layers; between stages travel the depth sources (standard: the
hidden state; block: embedding + completed blocks + partial sum; full: every sub-layer output), and their gradients
travel back. Each step runs DeepSpeed's `train_batch` over --grad-accum micro-batches per data-parallel replica.

Launch with torchrun or the deepspeed launcher; the number of processes must be a multiple of --num-stages (the
quotient is the data-parallel degree). With no arguments (under a 2-process launcher) it trains a tiny random block
AttnRes model on synthetic tokens.

CPU (gloo; DS_ACCELERATOR=cpu is set for you when no GPU is visible):
  torchrun --nproc_per_node 2 scripts/train_pipeline.py
  torchrun --nproc_per_node 2 scripts/train_pipeline.py --mode full --steps 20 --output-dir runs/pipe-full
GPU (NCCL), 4 stages x 2 data-parallel replicas on 8 GPUs, bf16, a prepared dataset and a checkpoint:
  deepspeed --num_gpus 8 scripts/train_pipeline.py --num-stages 4 --model path/to/checkpoint \\
      --data data/packed --seq-len 512 --micro-batch-size 4 --grad-accum 16 --bf16 --steps 1000 --output-dir runs/pp4

Outputs (--output-dir): log.jsonl (loss per step), comms.json (bytes per stage boundary against the minimum, with
--report-comms), and the trained model as a Hugging Face folder `model/` (one safetensors shard per stage, the code
files and the tokenizer of --data or --model: loads with
AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True) and AutoTokenizer, like a save_pretrained folder).
Pipeline parallelism combines with ZeRO-1 at most (DeepSpeed refuses ZeRO-2/3 with pipelines). Batches must be packed,
unpadded sequences (the stages rebuild causal masks themselves).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.train_pipeline import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
