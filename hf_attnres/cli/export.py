"""Export a model folder to the layout serving runtimes read: Kimi K3's (vLLM, SGLang, llama.cpp, TensorRT-LLM, MLX)
or Kimi Linear's (vLLM).

  --to k3           config.json architectures ["KimiK3ForConditionalGeneration"], model_type "kimi_k3", the model
                    under `text_config` with K3's field names; tensors under `language_model.` in Moonshot's names
  --to kimi-linear  architectures ["KimiLinearForCausalLM"], model_type "kimi_linear", with attn_res_block_size

MODEL_DIR is any folder this package reads (a trained or fine-tuned model, a Moonshot or K3 checkpoint); its tokenizer
files travel along. What a runtime cannot represent (Full AttnRes, the ablations, and for --to k3 anything that is not
K3's architecture: SiLU instead of SiTU, RoPE MLA, grouped routing, no KDA or no MLA layer) is refused by name, exit
2, before anything is written. The export streams one decoder layer at a time into a hidden folder renamed into place.

Examples:
  attnres export runs/k3-small/final exports/k3-small --to k3 --verify
  python convert_hf_to_gguf.py exports/k3-small --outtype f16 --outfile k3-small.gguf   # llama.cpp's converter
"""
from __future__ import annotations

import argparse
import sys

from ..conversion.export_args import ExportArgs
from ..utils.flags import parser_for
from . import command_main

EXIT_REFUSED, EXIT_ERROR = 2, 1


def build_parser() -> argparse.ArgumentParser:
    return parser_for(ExportArgs, prog="attnres export", description=__doc__)


def main(argv=None) -> dict | int:
    """Returns the export's summary dict, or an exit code: 2 refused (runtime cannot represent it), 1 other error."""
    args = ExportArgs(**vars(build_parser().parse_args(argv)))
    from ..conversion.commands import interrupted
    from ..conversion.errors import ConversionError
    from ..conversion.kimi_linear.export import export_checkpoint
    from ..conversion.kimi_linear.runtimes import ExportRefused
    from ..utils.safe_paths import signals_interrupt

    try:
        with signals_interrupt():  # Ctrl-C / SIGTERM: one line, nothing half-written (as convert)
            result = export_checkpoint(args.model_dir, args.out_dir, to=args.to, dtype=args.dtype, force=args.force,
                                       verify=args.verify, max_shard_size=args.max_shard_size,
                                       progress=not args.no_progress)
    except KeyboardInterrupt as stop:
        return interrupted(stop, args.out_dir)
    except ConversionError as error:
        print(f"attnres export: {error}\nnothing was written.", file=sys.stderr)
        return EXIT_REFUSED if isinstance(error, ExportRefused) else EXIT_ERROR
    print(f"{args.model_dir} -> {args.out_dir} (--to {args.to}): {result['tensors']} tensors, "
          f"{result['bytes'] / 2**20:.1f} MiB, side files {result['side_files'] or 'none (no tokenizer found)'}"
          f"{', verified' if args.verify else ''}")
    return result


def run():
    sys.exit(command_main("export"))


if __name__ == "__main__":
    run()
