"""Convert a checkpoint: a family's model folder or GGUF file into the family's own plain folder or its Block / Full
AttnRes model, and Kimi Linear checkpoints between Moonshot's layout and this project's HF-native layout.

Moonshot's layout (the remote-code format of Kimi Linear / Kimi K3 on the Hub): per-expert
`block_sparse_moe.experts.{e}.w1/w2/w3`, split `q/k/v_conv1d`, forget-gate tensors on `self_attn`, a 1-indexed
`linear_attn_config`, optionally wrapped under K3's `language_model.` (vision tensors are then left behind). Kimi K3's
MXFP4 routed experts (`weight_packed` + `weight_scale`) are dequantized on the way (exactly, to bf16); docs/K3.md
states the memory this needs.
HF-native: the tensor names of `KimiLinearAttnResForCausalLM` (`experts.gate_up_proj`, `conv1d`, `forget_gate.*`).

Any other supported family (docs/FAMILIES.md lists them) is read from its
model folder, or from a GGUF file that transformers reads (dequantized), and written with the source's tokenizer:
without --upcycle as the family's own plain folder (model_type `llama`, ..., no remote code: the matched baseline),
with --upcycle through the same path as the Python call `hf_attnres.upcycle(model)`. docs/CONVERSION.md has the details.

Examples:
  attnres convert moonshot_ckpt/ hf_ckpt/ --verify
  attnres convert hf_ckpt/ moonshot_again/ --to moonshot
  attnres convert kimi_linear_ckpt/ attnres_start/ --upcycle block --block-size 4
  attnres convert SmolLM2-135M-Instruct.Q4_1.gguf smollm2-plain/                       # the plain baseline
  attnres convert SmolLM2-135M-Instruct.Q4_1.gguf smollm2-block/ --upcycle block --check

Kimi Linear's tensors stream one decoder layer at a time: peak memory follows --max-shard-size (about twice it,
measured) plus a few decoder layers, not the checkpoint's size (another family's model is loaded whole, with its
upcycled copy). The output is written to a hidden temporary folder next to OUTPUT and renamed at the end, so an
interrupted run leaves no half-written model (a killed process may leave the hidden `.OUTPUT.partial-PID` folder,
never OUTPUT; the next run removes it). Ctrl-C or SIGTERM stops it with one line and
exit 130 / 143, nothing written; a full disk is one error naming ENOSPC. With --force an OUTPUT that is a symbolic
link is replaced as a link (the folder it points to is kept). Any problem (missing or unexpected tensors, wrong
shapes, malformed MXFP4 pairs, other quantized or unsupported dtypes) is reported, naming each tensor, before anything
is written. With no arguments, a tiny Moonshot-format demo checkpoint is written to outputs/tiny-moonshot and converted
to outputs/tiny-moonshot-hf.
"""
from __future__ import annotations

import argparse
import sys

from ..conversion.args import ConvertArgs
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(ConvertArgs, description=__doc__)


def parse_args(argv=None) -> ConvertArgs:
    parser = build_parser()
    args = ConvertArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    return args


def main(argv=None) -> int:
    """Convert (or write and convert the tiny demo); 0, or 1 with one `error:` line and nothing written."""
    args = parse_args(argv)
    from ..conversion.commands import convert

    return convert(args)


def run():
    sys.exit(command_main("convert"))


if __name__ == "__main__":
    run()
