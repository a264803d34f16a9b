"""Model configs for training: size presets (built on `attnres.tiny.tiny_config`'s hybrid layout) or a JSON file,
with the AttnRes mode and block size from the command line, so a matched baseline is one flag away."""
from __future__ import annotations

from pathlib import Path

from huggingface_hub.errors import StrictDataclassError

from ..configuration_attnres import KimiLinearAttnResConfig
from ..tiny import tiny_config

# Kimi Linear's shape at small scale: KDA with an MLA layer every third position, dense first MLP, then MoE
PRESETS = {
    "tiny": dict(num_layers=4, block_size=2),
    "small": dict(
        num_layers=8, block_size=2, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
        v_head_dim=64, num_local_experts=8, num_experts_per_tok=2, linear_num_heads=4, linear_head_dim=64,
    ),
    "base": dict(
        num_layers=12, block_size=3, hidden_size=768, intermediate_size=2048, moe_intermediate_size=384,
        num_attention_heads=12, num_key_value_heads=12, kv_lora_rank=256, qk_rope_head_dim=32, qk_nope_head_dim=64,
        v_head_dim=64, num_local_experts=16, num_experts_per_tok=2, linear_num_heads=12, linear_head_dim=64,
    ),
}


def build_config(model_size: str, config_file: Path | None, attn_res: str | None, block_size: int | None, tokenizer) -> KimiLinearAttnResConfig:
    """The model config; raises ValueError naming the file / field when it is invalid."""
    special = dict(pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id)
    if config_file is not None:
        try:
            fields = KimiLinearAttnResConfig.from_json_file(str(config_file)).to_dict()
        except (OSError, ValueError, TypeError, StrictDataclassError) as error:
            raise ValueError(f"--config {config_file}: {error}") from error
        mode = attn_res or fields.get("attn_res_mode") or "block"
        size = block_size if block_size is not None else fields.get("attn_res_block_size") or 0
        fields.update(attn_res_mode=mode, attn_res_block_size=size if mode == "block" else 0)
        if fields["vocab_size"] < len(tokenizer):
            raise ValueError(f"--config {config_file}: vocab_size {fields['vocab_size']} < tokenizer size {len(tokenizer)}")
        return _checked(lambda: KimiLinearAttnResConfig(**fields), f"--config {config_file}")
    preset = dict(PRESETS[model_size])
    num_layers, default_block = preset.pop("num_layers"), preset.pop("block_size")
    mode = attn_res or "block"
    return _checked(
        lambda: tiny_config(mode, block_size if block_size is not None else default_block, num_layers,
                            vocab_size=len(tokenizer), **special, **preset),
        f"--model-size {model_size}",
    )


def _checked(make, origin: str) -> KimiLinearAttnResConfig:
    try:
        return make()
    except (ValueError, TypeError, StrictDataclassError) as error:
        raise ValueError(f"{origin}: invalid model config: {error}") from error
