"""Which family a model folder or a GGUF file holds: the tools' side of `families.registry`, which maps a model_type
to its family and reads no file. A folder's family is read from its config.json; a GGUF file's from the config
transformers reads out of it, after the sizes transformers builds from are checked."""
from __future__ import annotations

from pathlib import Path

from ..families.registry import family_of_model_type
from .checkpoint_files import read_json_file

GGUF_SUFFIX = ".gguf"
# GGUF metadata sizes (`<architecture>.<key>`) transformers divides by or builds from
GGUF_SIZE_KEYS = (".block_count", ".context_length", ".embedding_length", ".feed_forward_length",
                  ".attention.head_count", ".attention.head_count_kv", ".vocab_size")


def family_of_folder(folder) -> tuple[str, str | None]:
    """(family, the config.json's own model_type) of a model folder; ValueError (CheckpointFileError for a missing
    or damaged config.json) naming the file or the reason."""
    model_type = read_json_file(Path(folder) / "config.json", "config.json").get("model_type")
    return family_of_model_type(model_type), model_type


def family_of_source(path: Path):
    """(family, transformers' config of a GGUF file or None for a folder) of a checkpoint to convert: a folder as
    `family_of_folder` reads it, a file named `*.gguf` as `gguf_config` reads it. ValueError naming the file and the
    reason (CheckpointFileError for a folder's missing or damaged config.json)."""
    if path.suffix != GGUF_SUFFIX:
        return family_of_folder(path)[0], None
    config = gguf_config(path)
    try:
        return family_of_model_type(config.model_type), config
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def gguf_config(path: Path):
    """transformers' config of a GGUF file, its header and sizes checked first (no tensor is read); ValueError
    naming the file and the field."""
    if not path.is_file():
        raise ValueError(f"{path}: not found (a GGUF file)")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)  # header, metadata and every tensor's extent, from a memory map: no tensor is read
    except Exception as error:  # noqa: BLE001  struct.error, ValueError, ...: any malformed file is one line
        raise ValueError(f"{path}: not a readable GGUF file ({type(error).__name__}: {error})") from None
    for key, field in reader.fields.items():  # sizes transformers divides by or builds from, before it reads them
        if key.endswith(GGUF_SIZE_KEYS) and len(field.data) == 1:
            value = field.parts[field.data[0]].tolist()
            value = value[0] if isinstance(value, list) and len(value) == 1 else value
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{path}: field {key}={value!r} must be an integer >= 1")
    return transformers_config(path.parent, path.name, path)


def transformers_config(folder: Path, gguf_file: str | None, where: Path):
    """`AutoConfig.from_pretrained(folder, gguf_file=...)`; ValueError naming `where` when transformers cannot read
    it."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, gguf_file=gguf_file)
    except Exception as error:  # noqa: BLE001  any reader failure is one line naming the file
        raise ValueError(f"{where}: transformers cannot read it ({type(error).__name__}: {error})") from None


def attn_res_config_of_folder(folder, flag: str):
    """The AttnRes config of an AttnRes model folder of any family, read by its family's config class (the family
    named by its config.json's model_type; Kimi Linear reads its own checkpoints too). A family's own plain checkpoint
    (`llama`, not `llama_attnres`) is refused: it has no AttnRes tensors yet. ValueError in one line naming the flag
    and the folder."""
    from ..families.registry import family_classes

    try:
        family, model_type = family_of_folder(folder)
        if family != "kimi_linear" and model_type == family:
            raise ValueError(f"a plain {model_type} checkpoint, without AttnRes tensors: upcycle it first (`attnres "
                             f"convert {folder} OUT --upcycle block`), or fine-tune it as it is with `attnres train "
                             f"--init-from {folder}`")
        return family_classes(family)[0].from_pretrained(folder)
    except (OSError, TypeError, ValueError) as error:
        raise ValueError(f"{flag} {folder}: {error}") from None
