"""training_info.json in a run's final/ folder: what the model saw, so an evaluation can tell whether two models are
matched (same tokens trained, same data) without the run folder around it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..atomic_io import write_json_atomic
from .packing import DATASET_DIR, META_FILE

INFO_FILE = "training_info.json"


def data_fingerprint(data_dir: Path) -> str:
    """sha256 over the prepared folder's meta.json and the `datasets` fingerprints of its splits (cheap: no data
    is read; `datasets` already hashes the content that produced each split)."""
    data_dir = Path(data_dir)
    digest = hashlib.sha256((data_dir / META_FILE).read_bytes())
    for state in sorted((data_dir / DATASET_DIR).glob("*/state.json")):
        digest.update(json.loads(state.read_text()).get("_fingerprint", "").encode())
    return digest.hexdigest()[:16]


def write_training_info(folder: Path, args, global_batch: int, step: int, signature: dict) -> None:
    write_json_atomic(Path(folder) / INFO_FILE, dict(
        steps=step, tokens_trained=step * global_batch * args.seq_len, global_batch=global_batch, seq_len=args.seq_len,
        data=str(args.data), data_fingerprint=data_fingerprint(args.data), signature=signature,
    ))
