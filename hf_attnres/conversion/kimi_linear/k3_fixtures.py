"""Tiny Kimi K3-format checkpoints, written locally from the layout
(hf_attnres/families/kimi_linear/k3/layout.py): for tests and demos.

The folder holds what K3's does: config.json with `text_config` (K3 fields, `linear_attn_config` with the KDA gate
fields, the MXFP4 quantization_config) and `vision_config`; weights under `language_model.` in Moonshot's names;
routed experts as MXFP4 `weight_packed` / `weight_scale`; KDA `A_log` padded to head_dim; a vision tower and projector.
The model's experts are first snapped to the MXFP4 grid, so the folder describes that model exactly.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ...families.kimi_linear.conversion_mapping import LANGUAGE_MODEL_PREFIX, convert_tensors
from ...families.kimi_linear.k3.config import K3_WRAPPER_TYPE
from ...families.kimi_linear.k3.mxfp4 import GROUP_SIZE, QUANT_FORMAT, QUANT_METHOD, dequantize
from .config import moonshot_config_dict
from .writer import ShardedWriter

# The E2M1 magnitudes, ascending
_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_EXPERT = re.compile(r"\.experts\.\d+\.w[123]\.weight$")
_A_LOG = re.compile(r"self_attn\.A_log$")


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[out, in] -> MXFP4 (packed uint8 [out, in/2], scale uint8 [out, in/32]): per group, the power of two that puts
    the largest magnitude within E2M1's 6, then the nearest code. A test helper, not a production quantizer."""
    out, width = weight.shape
    groups = weight.float().reshape(out, width // GROUP_SIZE, GROUP_SIZE)
    amax = groups.abs().amax(-1, keepdim=True).clamp_min(2.0**-120)
    exponent = (torch.floor(torch.log2(amax)) - 2).clamp(-127, 127)
    scaled = groups / torch.exp2(exponent)
    magnitude = (scaled.abs().unsqueeze(-1) - _E2M1).abs().argmin(-1)
    codes = (magnitude | ((scaled < 0) & (magnitude > 0)).to(torch.long) << 3).reshape(out, width).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, (exponent.squeeze(-1) + 127).to(torch.uint8)


def snap_experts_to_mxfp4(model) -> None:
    """Replace every routed expert weight by its MXFP4 round trip (the values a K3 checkpoint can hold)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                for e in range(param.shape[0]):
                    param[e] = dequantize(*quantize(param[e]), dtype=param.dtype)


def k3_state_dict(model, vision: bool = True) -> dict[str, torch.Tensor]:
    """The model's tensors as K3 stores them (see the module docstring)."""
    state = convert_tensors({k: v.detach().clone() for k, v in model.state_dict().items()}, model.config, "moonshot")
    k3 = {}
    for name, tensor in state.items():
        if _EXPERT.search(name):
            k3[name + "_packed"], k3[name + "_scale"] = quantize(tensor)
            k3[name.removesuffix(".weight") + ".weight_packed"] = k3.pop(name + "_packed")
            k3[name.removesuffix(".weight") + ".weight_scale"] = k3.pop(name + "_scale")
        elif _A_LOG.search(name):
            padded = torch.zeros(model.config.linear_head_dim, dtype=tensor.dtype)
            padded[: tensor.numel()] = tensor.reshape(-1)
            k3[name] = padded
        else:
            k3[name] = tensor
    k3 = {LANGUAGE_MODEL_PREFIX + name: tensor for name, tensor in k3.items()}
    if vision:
        hidden = model.config.hidden_size
        k3["vision_tower.encoder.blocks.0.wqkv.weight"] = torch.randn(3 * 8, 8)
        k3["vision_tower.patch_embed.proj.weight"] = torch.randn(8, 3, 2, 2)
        k3["mm_projector.proj.0.weight"] = torch.randn(hidden, 4 * 8)
    return k3


def k3_config_dict(config) -> dict:
    text = moonshot_config_dict(config)
    text["quantization_config"] = {
        "quant_method": QUANT_METHOD, "format": QUANT_FORMAT,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "float", "group_size": GROUP_SIZE, "strategy": "group", "symmetric": True}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*"],
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": K3_WRAPPER_TYPE, "text_config": text,
        "vision_config": {"vt_num_hidden_layers": 1, "vt_hidden_size": 8, "mm_projector_type": "patchmergerv2"},
        "media_placeholder_token_id": config.vocab_size - 1,
    }


def write_k3_checkpoint(folder: str | Path, model, max_shard_size: int | str = "5GB", vision: bool = True) -> Path:
    """Save `model` (its experts snapped to MXFP4 first, in place) as a K3-format folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    snap_experts_to_mxfp4(model)
    state = k3_state_dict(model, vision)
    writer = ShardedWriter(folder, {k: v.to("meta") for k, v in state.items()}, max_shard_size)
    for name, tensor in state.items():
        writer.add(name, tensor)
    writer.finish()
    (folder / "config.json").write_text(json.dumps(k3_config_dict(model.config), indent=2))
    return folder


def tiny_k3_config(num_layers: int = 4, block_size: int = 2, **overrides):
    """A few-layer config with every K3 piece on (one KDA layer, the rest MLA: KDA's CPU fallback is slow).
    Widths are multiples of MXFP4's group of 32 where experts read them."""
    from ...utils.tiny import K3_PIECES, shape_fields, tiny_config

    fields = dict(
        shape_fields(K3_PIECES), routed_expert_hidden_size=32, moe_intermediate_size=32, num_local_experts=4,
        num_experts_per_tok=2, n_shared_experts=2,
        layer_types=["linear_attention"] + ["full_attention"] * (num_layers - 1),
    )
    fields.update(overrides)
    return tiny_config("block", block_size, num_layers, **fields, family="kimi_linear")
