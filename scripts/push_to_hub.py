#!/usr/bin/env python3
"""Package a Kimi Linear AttnRes checkpoint for the Hugging Face Hub and upload it.

The folder it builds holds: the weights (HF-native safetensors), config.json with `auto_map`, the remote-code files
(`configuration_attnres.py`, `modeling_attnres.py`) so `AutoModelForCausalLM.from_pretrained(repo,
trust_remote_code=True)` works, the tokenizer when --tokenizer is given, and a generated model card (README.md:
architecture, AttnRes mode and block count, parameter count, training data, evaluation table when --eval-results is
given). Then it creates the repository and uploads the folder with huggingface_hub (log in first: `hf auth login`).

Examples:
  python scripts/push_to_hub.py --model runs/attnres-block --repo-id me/kimi-attnres --tokenizer runs/tokenizer \\
      --training-data "FineWeb-Edu, 10B tokens" --dataset HuggingFaceFW/fineweb-edu --eval-results outputs/eval/report.json
  python scripts/push_to_hub.py --model moonshot_ckpt/ --output outputs/hub --dry-run   # build only

--model may be HF-native or Moonshot's layout. With no arguments, a tiny demo model is packaged into
outputs/hub-tiny and nothing is uploaded (no --repo-id means a dry run).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="checkpoint folder to package (default: a tiny demo model)")
    parser.add_argument("--repo-id", help="Hub repository, e.g. user/name (without it: dry run)")
    parser.add_argument("--output", type=Path, help="folder to build (default: outputs/hub-<repo or model name>)")
    parser.add_argument("--tokenizer", help="tokenizer folder or Hub id to include")
    parser.add_argument("--training-data", help="what the model was trained on, for the model card")
    parser.add_argument("--dataset", action="append", default=[], help="Hub dataset id for the card metadata "
                        "(repeatable)")
    parser.add_argument("--eval-results", type=Path, help="eval/compare.py's report.json, lm-eval results JSON (or "
                        "{task: {metric: value}}) for the card's evaluation table")
    parser.add_argument("--license", default="apache-2.0", help="license tag of the card (default apache-2.0)")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--commit-message", help="upload commit message")
    parser.add_argument("--dry-run", action="store_true", help="build the folder, do not upload")
    parser.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from attnres.conversion import ConversionError
    from attnres.checkpoint_files import CheckpointFileError, check_model_folder
    from attnres.conversion.hub import build_hub_folder, check_repo_id, upload_folder

    if args.model is None:
        from attnres.conversion.fixtures import random_model
        from attnres.tiny import tiny_config

        args.model = Path("outputs/tiny-attnres")
        random_model(tiny_config("block", 2)).save_pretrained(args.model)
        args.force = True
        print(f"wrote a tiny demo model to {args.model}")
    try:  # every input checked before the build (the model folder, the repository id)
        check_model_folder(args.model, "--model")
        if args.repo_id is not None:
            check_repo_id(args.repo_id)
    except (ConversionError, CheckpointFileError) as error:
        print(f"error: {error}\nnothing was written.", file=sys.stderr)
        return 1
    name = (args.repo_id or args.model.resolve().name).replace("/", "--")
    output = args.output or Path("outputs") / f"hub-{name}"
    try:
        folder = build_hub_folder(
            args.model, output, tokenizer=args.tokenizer, training_data=args.training_data, datasets=args.dataset,
            eval_results=args.eval_results, repo_id=args.repo_id, license=args.license, force=args.force,
        )
    except (OSError, ValueError) as error:  # ConversionError, damaged files, a tokenizer that does not load
        print(f"error: {error}\nnothing was written.", file=sys.stderr)
        return 1
    print(f"built {folder}: " + ", ".join(sorted(p.name for p in folder.iterdir())))
    if args.dry_run or not args.repo_id:
        print("dry run: not uploaded" + ("" if args.repo_id else " (no --repo-id)"))
        return 0
    try:
        url = upload_folder(folder, args.repo_id, private=args.private, commit_message=args.commit_message)
    except Exception as error:  # noqa: BLE001  network, authentication, Hub errors: one line, the folder is kept
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"error: upload to {args.repo_id} failed ({type(error).__name__}: {reason}); the built folder "
              f"{folder} is kept: retry when the Hub is reachable and you are logged in (`hf auth login`)",
              file=sys.stderr)
        return 1
    print(f"uploaded: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
