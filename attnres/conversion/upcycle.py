"""Upcycling in the converter: Kimi Linear folders stream tensor by tensor (`attnres.conversion.convert`), with the
new tensors below; every other family goes through the Python call `attnres.upcycle` (`attnres.families.upcycle`,
which explains why the function is kept), from `attnres.conversion.family_convert`. Both take their upcycled config
from the one builder, `upcycled_family_config`."""
from __future__ import annotations

from ..families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from ..families.upcycle import (  # noqa: F401  (re-exported: the converter's names)
    DEFAULT_NUM_BLOCKS,
    UPCYCLE_MODES,
    UpcycleError,
    default_block_size,
    is_attn_res_tensor,
    new_attn_res_tensor,
    resolve_block_size,
    upcycled_family_config,
)
from .errors import ConversionError


def upcycled_config(
    config: KimiLinearAttnResConfig, mode: str, block_size: int | None = None
) -> KimiLinearAttnResConfig:
    if config.attn_res_mode != "standard":
        raise ConversionError(
            "--upcycle needs a standard-residual checkpoint, "
            f"but config.json has attn_res_mode={config.attn_res_mode!r}"
        )
    try:
        return upcycled_family_config(config, mode, block_size)[0]
    except UpcycleError as error:
        raise ConversionError(str(error)) from None
