"""The config checks of the gated read (`attn_res_gated_read`, hf_attnres.core.gated_read), registered on the
config classes at import: a saved folder's configuration holds them only where its config reads through the gate.
"""
from hf_attnres.core.config import AttnResConfigChecks


def check_gated_read(config) -> None:
    """The gated read reads the depth sources of a block or full layout through the softmax mix and its own gate: not
    with the ablations' mixes, not through the two-phase schedule."""
    if not config.attn_res_gated_read:
        return
    if config.attn_res_mode == "standard":
        raise ValueError("attn_res_gated_read=True reads the depth sources: it needs attn_res_mode 'block' or 'full', "
                         "got 'standard'")
    if config.attn_res_static_mixing or config.attn_res_score != "softmax" or not config.attn_res_key_norm:
        raise ValueError("attn_res_gated_read=True gates the softmax mix: it does not combine with the ablations "
                         "(attn_res_static_mixing, attn_res_score, attn_res_key_norm)")
    if config.attn_res_two_phase:
        raise ValueError("attn_res_gated_read=True reads every point's sources in full: attn_res_two_phase must be "
                         "None or False")


AttnResConfigChecks.feature_checks["attn_res_gated_read"] = check_gated_read

__all__ = ["check_gated_read"]
