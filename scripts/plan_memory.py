#!/usr/bin/env python3
"""What hardware a Kimi Linear / AttnRes / Kimi K3 model needs, from its config alone (nothing is instantiated).

Prints parameter counts (by part), weight memory per storage format (fp32, bf16, bf16 with MXFP4 routed experts as
Kimi K3 ships them), the AttnRes depth bank (the block sums and partial sum a forward holds) for a batch and context,
and the bytes crossing each pipeline boundary per micro-batch (every depth source present there crosses it).

CONFIG is a config.json (or a folder holding one) in any layout this project reads (ours, Moonshot's, Kimi K3's
multimodal wrapper), or a preset: k3 (Kimi K3's published text config, the default), tiny, tiny-k3.

Examples:
  python scripts/plan_memory.py                                  # Kimi K3, batch 1, 32k context, 8 stages
  python scripts/plan_memory.py path/to/config.json --batch 4 --context 131072 --stages 16
  python scripts/plan_memory.py tiny-k3 --activation-dtype fp32
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PRESETS = ("k3", "tiny", "tiny-k3")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default="k3", help=f"config.json, a folder, or a preset {PRESETS}")
    parser.add_argument("--batch", type=int, default=1, help="sequences in the forward (default 1)")
    parser.add_argument("--context", type=int, default=32768, help="tokens per sequence (default 32768)")
    parser.add_argument("--stages", type=int, default=8, help="pipeline stages, decoder layers split evenly (default 8)")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per pipeline micro-batch (default 1)")
    parser.add_argument("--activation-dtype", choices=("bf16", "fp32"), default="bf16",
                        help="dtype of the depth sources and boundary tensors (default bf16)")
    args = parser.parse_args(argv)
    for name in ("batch", "context", "stages", "micro_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def load_config(spec: str):
    from attnres.conversion.config import parse_config

    if spec in PRESETS:
        if spec == "k3":
            from attnres.conversion.k3_preset import k3_config_dict

            return parse_config(k3_config_dict()), "Kimi K3 (published config)"
        from attnres.conversion.k3_fixtures import tiny_k3_config
        from attnres.tiny import tiny_config

        return (tiny_config() if spec == "tiny" else tiny_k3_config()), spec
    path = Path(spec)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"{spec}: neither a config.json, a folder holding one, nor a preset {PRESETS}")
    try:
        config_dict = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error})") from error
    if not isinstance(config_dict, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return parse_config(config_dict), str(path)


def gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def report(config, name: str, args) -> str:
    from attnres.memory_plan import (DTYPE_BYTES, count_parameters, depth_bank_bytes, max_sources,
                                     pipeline_boundaries, weight_bytes)

    counts = count_parameters(config)
    act = DTYPE_BYTES[args.activation_dtype]
    lines = [f"{name}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, attn_res_mode="
             f"{config.attn_res_mode}" + (f" (block size {config.attn_res_block_size})" if config.attn_res_mode == "block" else ""),
             "", "parameters"]
    for part in ("embedding", "lm_head", "attention", "dense_mlp", "routed_experts", "moe_other", "norms", "attn_res"):
        lines.append(f"  {part:<16}{getattr(counts, part):>20,}")
    lines += [f"  {'total':<16}{counts.total:>20,}", "", "weights (parameters only: no optimizer state, caches, activations)"]
    lines += [f"  {fmt:<30}{gib(n):>16}" for fmt, n in weight_bytes(counts).items()]
    bank = depth_bank_bytes(config, args.batch, args.context, act)
    lines += ["", f"AttnRes depth bank, batch {args.batch} x {args.context} tokens, {args.activation_dtype}: "
              f"{max_sources(config)} sources of [batch, tokens, hidden] = {gib(bank)}",
              "  (a chunked prefill holds it for one chunk, a decode step for one token)"]
    stages = min(args.stages, config.num_hidden_layers)
    lines += ["", f"pipeline boundaries, {stages} stages, micro-batch {args.micro_batch} x {args.context} tokens, "
              f"{args.activation_dtype} (each direction: activations forward, gradients back)",
              "  before-layer  tensors  bytes/micro-batch"]
    for layer, tensors, nbytes in pipeline_boundaries(config, stages, args.micro_batch, args.context, act):
        lines.append(f"  {layer:>12}  {tensors:>7}  {nbytes:>17,}  ({gib(nbytes)})")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config, name = load_config(args.config)
    except ValueError as error:  # ConversionError is one
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(report(config, name, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
