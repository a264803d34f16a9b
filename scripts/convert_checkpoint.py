#!/usr/bin/env python3
"""Convert Kimi Linear checkpoints between Moonshot's layout and this project's HF-native layout.

Moonshot's layout (the remote-code format of Kimi Linear / Kimi K3 on the Hub): per-expert
`block_sparse_moe.experts.{e}.w1/w2/w3`, split `q/k/v_conv1d`, forget-gate tensors on `self_attn`, a 1-indexed
`linear_attn_config`, optionally wrapped under K3's `language_model.` (vision tensors are then left behind). Kimi K3's
MXFP4 routed experts (`weight_packed` + `weight_scale`) are dequantized on the way (exactly, to bf16); README "Kimi K3"
states the memory this needs.
HF-native: the tensor names of `KimiLinearAttnResForCausalLM` (`experts.gate_up_proj`, `conv1d`, `forget_gate.*`).

Examples:
  python scripts/convert_checkpoint.py moonshot_ckpt/ hf_ckpt/ --verify
  python scripts/convert_checkpoint.py hf_ckpt/ moonshot_again/ --to moonshot
  python scripts/convert_checkpoint.py kimi_linear_ckpt/ attnres_start/ --upcycle block --block-size 4

Tensors stream one decoder layer at a time: peak memory follows --max-shard-size (about twice it, measured) plus a
few decoder layers, not the checkpoint's size. The output is written to a hidden temporary folder next to OUTPUT and
renamed at the end, so an interrupted run leaves no half-written model (a killed process may leave the hidden
`.OUTPUT.partial-PID` folder, never OUTPUT). Any problem (missing or unexpected tensors, wrong shapes, malformed MXFP4
pairs, other quantized or unsupported dtypes) is reported, naming each tensor, before anything is written. With no
arguments, a tiny Moonshot-format demo checkpoint is written to outputs/tiny-moonshot and converted to
outputs/tiny-moonshot-hf.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.convert import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
