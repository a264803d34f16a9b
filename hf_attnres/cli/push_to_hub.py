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
from pathlib import Path

from ..conversion.args import PushArgs
from ..conversion.hub import DEFAULT_LICENSE, check_license
from ..utils.trust import add_trust_flag
from . import command_main
from .combos import refuse_conflicts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="checkpoint folder to package (default: a tiny demo model)")
    parser.add_argument("--repo-id", help="Hub repository, e.g. user/name (without it: dry run)")
    parser.add_argument("--output", type=Path, help="folder to build (default: outputs/hub-<repo or model name>)")
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id to include (default: --model's own, if any)")
    parser.add_argument("--base-model", help="Hub id of the model this one was made from, for the card's base_model "
                        "(default: the first Hub id in the folder's records: training_info.json's init_from, "
                        "config.json's _name_or_path, followed through local --init-from folders; none found: the "
                        "card and the output say it is unknown)")
    add_trust_flag(parser)  # --tokenizer DIR's own code: off unless asked
    parser.add_argument("--training-data", help="what the model was trained on, for the model card")
    parser.add_argument("--dataset", action="append", default=[], help="Hub dataset id for the card metadata "
                        "(repeatable)")
    parser.add_argument("--eval-results", type=Path, help="eval/compare.py's report.json, lm-eval results JSON (or "
                        "{task: {metric: value}}) for the card's evaluation table")
    parser.add_argument("--license", help=f"Hub license identifier of the card (default {DEFAULT_LICENSE}, said so in "
                        "the output: check it agrees with the base model's license)")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--commit-message", help="upload commit message")
    parser.add_argument("--dry-run", action="store_true", help="build the folder, do not upload")
    parser.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    return parser


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
