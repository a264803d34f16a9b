"""Tiny Moonshot-format checkpoints, written locally: for tests, demos and the scripts' no-argument runs."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ...families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from ...families.kimi_linear.conversion_mapping import LANGUAGE_MODEL_PREFIX, convert_tensors
from .config import moonshot_config_dict
from .writer import ShardedWriter


def random_model(config: KimiLinearAttnResConfig, seed: int = 0):
    """A model with every weight random, pseudo-queries included (zero queries would hide mixing bugs)."""
    from ...families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM

    torch.manual_seed(seed)
    model = KimiLinearAttnResForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("_res_proj.weight"):
                param.normal_(0, 0.5)
    return model


def write_moonshot_checkpoint(
    folder: str | Path, model, max_shard_size: int | str = "5GB", wrap: bool = False, vision_tensors: bool = False
) -> Path:
    """Save `model` as Moonshot's remote code stores it; `wrap` nests it under K3's multimodal `language_model.`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = convert_tensors({k: v.detach().clone() for k, v in model.state_dict().items()}, model.config, "moonshot")
    if wrap:
        state = {LANGUAGE_MODEL_PREFIX + name: tensor for name, tensor in state.items()}
    if vision_tensors:
        state["vision_tower.patch_embed.weight"] = torch.randn(8, 3, 2, 2)
    writer = ShardedWriter(folder, {k: v.to("meta") for k, v in state.items()}, max_shard_size)
    for name, tensor in state.items():
        writer.add(name, tensor)
    writer.finish()
    config_dict = moonshot_config_dict(model.config)
    if wrap:
        config_dict = {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"],
                       "text_config": config_dict}
    (folder / "config.json").write_text(json.dumps(config_dict, indent=2))
    return folder
