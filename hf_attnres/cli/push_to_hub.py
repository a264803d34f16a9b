"""Package an AttnRes checkpoint of any family for the Hugging Face Hub and upload it.

The folder it builds holds: the weights (HF-native safetensors), config.json with its `auto_map`, the family's
generated code files (e.g. `configuration_llama_attnres.py`, `modeling_llama_attnres.py`, `attnres_core*.py`,
`kernels_attnres*.py`; docs/PUBLISHING.md) so
`AutoModelForCausalLM.from_pretrained(repo, trust_remote_code=True)` works with only torch and transformers, for every
family alike, the tokenizer (--tokenizer, else the one in --model's folder), and a generated model card (README.md:
architecture, AttnRes mode and block layout, parameter count, base_model, training data from --training-data or the
folder's training_info.json, evaluation table when --eval-results is given, how to load it). Then it creates the
repository and uploads the folder with huggingface_hub (log in first: `hf auth login`).

The folder a --dry-run built is reused by the upload that follows when nothing changed (inputs and the folder's files,
by content), and rebuilt in place when an input, a card setting or one of its files did (it carries a
.attnres_hub_build.json record, never uploaded); any other existing --output needs --force. The output ends with the
card's license (saying when it is the default, apache-2.0) and its base_model with where it was found, or a note that
none was found and how to set it.

Examples:
  attnres push-to-hub --model runs/attnres-block --repo-id me/kimi-attnres --tokenizer runs/tokenizer \\
      --training-data "FineWeb-Edu, 10B tokens" --dataset HuggingFaceFW/fineweb-edu \\
      --eval-results outputs/eval/report.json
  attnres push-to-hub --model moonshot_ckpt/ --output outputs/hub --dry-run             # build only

--model may be HF-native or Moonshot's layout. With no arguments, a tiny demo model is packaged into
outputs/hub-tiny and nothing is uploaded (no --repo-id means a dry run).
"""
from __future__ import annotations

import argparse
import sys

from ..conversion.args import PushArgs
from ..conversion.hub import check_license
from ..utils.flags import parser_for
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    return parser_for(PushArgs, description=__doc__)


def main(argv=None) -> int:
    """Build (and upload) the Hub folder; 0, or 1 with one `error:` line."""
    parser = build_parser()
    args = PushArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    if args.license is not None:
        try:
            check_license(args.license)
        except ValueError as error:
            parser.error(str(error))
    from ..conversion.commands import push_to_hub

    return push_to_hub(args)


def run():
    sys.exit(command_main("push-to-hub"))


if __name__ == "__main__":
    run()
