"""Silence two library notices that carry no information for the user, and only those (every other record passes).

- DeepSpeed logs "Setting accelerator to CPU ..." (to stdout) whenever it is imported on a machine without an
  accelerator, and accelerate imports it from every `save_pretrained` once it is installed: on a CPU machine that is
  the expected choice, not a warning.
- accelerate's safetensors save logs "Removed shared tensor {...} while saving" for the output embedding of a model
  whose config ties it to the input embedding: the tie is declared, so loading re-creates it; only those names are
  silenced (an undeclared alias still warns).
"""
from __future__ import annotations

import logging
import re
from contextlib import contextmanager

CPU_NOTICE = "Setting accelerator to CPU"


class _DropCpuNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return CPU_NOTICE not in str(record.msg)


_CPU_FILTER = _DropCpuNotice()


def quiet_deepspeed_cpu_notice() -> None:
    """Install the filter on DeepSpeed's logger (before or after DeepSpeed is imported: it keeps the logger object)."""
    logger = logging.getLogger("DeepSpeed")
    if _CPU_FILTER not in logger.filters:
        logger.addFilter(_CPU_FILTER)


def declared_ties(model) -> set[str]:
    """State-dict names of `model` that alias another of its parameters because its config ties the embeddings."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    seen, aliases = {}, set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            aliases.add(name)
        seen.setdefault(id(parameter), name)
    return aliases


@contextmanager
def tied_save_quiet(model):
    """Within: accelerate's "Removed shared tensor" notice is dropped when it names only `model`'s declared ties."""
    ties = declared_ties(model)

    def keep(record: logging.LogRecord) -> bool:
        message = record.getMessage()  # accelerate's adapter may prefix "[RANK 0] "
        if "Removed shared tensor" not in message or not ties:
            return True
        named = set(re.findall(r"'([^']+)'", message.partition("Removed shared tensor")[2].split(" while saving")[0]))
        return not (named and all(name.removeprefix("module.") in ties for name in named))

    logger = logging.getLogger("accelerate.utils.other")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
