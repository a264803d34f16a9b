#!/usr/bin/env python3
"""Package a Kimi Linear AttnRes checkpoint for the Hugging Face Hub and upload it.

The folder it builds holds: the weights (HF-native safetensors), config.json with `auto_map`, the remote-code files
(`configuration_attnres.py`, `modeling_attnres.py`) so `AutoModelForCausalLM.from_pretrained(repo,
trust_remote_code=True)` works, the tokenizer when --tokenizer is given, and a generated model card (README.md:
architecture, AttnRes mode and block count, parameter count, training data, evaluation table when --eval-results is
given). Then it creates the repository and uploads the folder with huggingface_hub (log in first: `hf auth login`).

Examples:
  python scripts/push_to_hub.py --model runs/attnres-block --repo-id me/kimi-attnres --tokenizer runs/tokenizer \\
      --training-data "FineWeb-Edu, 10B tokens" --dataset HuggingFaceFW/fineweb-edu \\
      --eval-results outputs/eval/report.json
  python scripts/push_to_hub.py --model moonshot_ckpt/ --output outputs/hub --dry-run   # build only

--model may be HF-native or Moonshot's layout. With no arguments, a tiny demo model is packaged into
outputs/hub-tiny and nothing is uploaded (no --repo-id means a dry run).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from attnres.cli.push_to_hub import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
