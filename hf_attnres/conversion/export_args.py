"""`attnres export`'s flags as one dataclass, one field per flag (hf_attnres/cli/export.py parses them; a test holds
fields and flags equal). Export has no flag that another makes meaningless: what a runtime cannot represent is refused
by the export itself, by name, before anything is written."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ExportArgs:
    model_dir: Path
    out_dir: Path
    to: str
    dtype: str = "auto"
    verify: bool = False
    force: bool = False
    max_shard_size: str = "5GB"
    no_progress: bool = False
