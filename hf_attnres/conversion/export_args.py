"""`attnres export`'s flags as one dataclass, one field per flag (hf_attnres/cli/export.py parses them; each field
declares its flag). Export has no flag that another makes meaningless: what a runtime cannot represent is refused
by the export itself, by name, before anything is written."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..utils.flags import flag
from .kimi_linear.export import DTYPES
from .kimi_linear.runtimes import TARGETS


@dataclass
class ExportArgs:
    model_dir: Path = flag(positional=True, type=Path, help="model folder (config.json + *.safetensors + tokenizer)")
    out_dir: Path = flag(positional=True, type=Path, help="folder to create (must not exist, unless --force)")
    to: str = flag(choices=TARGETS, help="the layout to write")
    dtype: str = flag(
        "auto", choices=tuple(DTYPES), help="cast floating-point tensors (default auto: keep each tensor's dtype)")
    verify: bool = flag(
        False, action="store_true",
        help="re-read the export bit for bit and load it back with "
             "from_pretrained, comparing every parameter, before it is put in place")
    force: bool = flag(False, action="store_true", help="replace OUT_DIR if it exists")
    max_shard_size: str = flag("5GB", help="largest output shard (default 5GB)")
    no_progress: bool = flag(False, action="store_true", help="no progress bars")
