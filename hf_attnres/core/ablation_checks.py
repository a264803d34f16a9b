"""The config checks of the paper's ablations of the depth mix (`attn_res_static_mixing`, `attn_res_score`,
`attn_res_key_norm`; hf_attnres.core.ablations), registered on the config classes at import: a saved folder's
configuration holds them only where its config ablates the mix.
"""
from hf_attnres.core.config import AttnResConfigChecks

_ABLATION_FIELDS = "(attn_res_static_mixing, attn_res_score, attn_res_key_norm)"


def check_ablations(config) -> None:
    """An ablation changes the mix of a block or full layout, on the PyTorch reference op (no fused kernel)."""
    if not config.attn_res_ablation:
        return
    if config.attn_res_mode == "standard":
        raise ValueError("attn_res_static_mixing / attn_res_score / attn_res_key_norm ablate the depth mix: "
                         "they need attn_res_mode 'block' or 'full', got 'standard'")
    if config.attn_res_static_mixing and not config.attn_res_key_norm:
        raise ValueError("attn_res_key_norm=False has no effect with attn_res_static_mixing=True (no keys are scored)")
    if config.attn_res_backend == "triton":
        raise ValueError(f"attn_res_backend 'triton' has no fused kernel for the ablations {_ABLATION_FIELDS}: use "
                         "'auto' or 'torch' (the PyTorch reference)")
    if config.attn_res_two_phase:
        raise ValueError(f"attn_res_two_phase=True batches pseudo-query softmaxes: it does not apply to the ablations "
                         f"{_ABLATION_FIELDS}")


AttnResConfigChecks.feature_checks["attn_res_ablation"] = check_ablations

__all__ = ["check_ablations"]
