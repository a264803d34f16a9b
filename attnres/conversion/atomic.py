"""The one writer of a conversion's output folder (convert, export, push-to-hub): built in a hidden sibling, renamed
into place all at once, so a failure or a kill leaves no half-written folder; and a model written into it."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from ..folders.atomic_io import OutputConflictError, move_into_place, temporary_folder  # noqa: F401  (re-exported)
from ..folders.saved_model import write_weights_record
from ..utils.safe_paths import write_failure
from .errors import ConversionError


@contextmanager
def output_folder(output: Path):
    """`temporary_folder(output)` (a hidden sibling to build in, removed on any failure; the caller renames it with
    `move_into_place`) where a filesystem error while building (disk full, no permission) becomes one
    ConversionError naming the error and the output: nothing half-written stays behind."""
    try:
        with temporary_folder(output) as folder:
            yield folder
    except ConversionError:
        raise
    except OutputConflictError as error:  # another writer of the same output (`claim_output`, `move_into_place`)
        raise ConversionError(str(error)) from None
    except Exception as error:  # OSError, or safetensors' own error type for a failed write
        message = write_failure(output, error)
        if message is None:
            raise
        raise ConversionError(message) from None


def write_model(model, folder: Path, tokenizer=None, **save_kwargs) -> None:
    """`model.save_pretrained(folder, **save_kwargs)` into the folder being built, the tokenizer beside it. An
    AttnRes model's folder also carries its weights record (`attnres_weights.json`: what the weights were saved as,
    checked on load); a plain transformers model's folder is transformers' own, nothing of ours."""
    model.save_pretrained(folder, **save_kwargs)
    if hasattr(model.config, "attn_res_mode"):
        write_weights_record(folder, model.config)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
