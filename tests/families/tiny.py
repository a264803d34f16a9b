"""Tiny random models of every supported family: the family's own config and causal LM, and the AttnRes ones."""
from __future__ import annotations

import torch

from hf_attnres.families.registry import SUPPORTED, declaration, family_classes

VOCAB = 96
SHAPE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# each family with what distinguishes it switched on: sliding windows shorter than the test sequences (Mistral,
# Qwen2's upper layers, Gemma 3's local layers), q/k norms (Qwen3), Gemma's scaled embedding, post-norms, soft-capping,
# Phi-3's partial rotary embedding (fused qkv / gate_up are its modules; its residual dropouts: test_family_models)
DISTINCT = {
    "mistral": dict(sliding_window=4),
    "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=2),
    "qwen3": dict(head_dim=8),
    "gemma3_text": dict(head_dim=8, sliding_window=4, final_logit_softcapping=30.0),
    # rms_norm_eps: the other families' default (Phi-3's is 1e-5), so the upcycling checks compare like with like
    "phi3": dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5),
                 rms_norm_eps=1e-6),
}
# every family of the registry but Kimi Linear (its MoE / KDA layout has its own tiny configs, hf_attnres.utils.tiny)
FAMILIES = {family: (declaration(family).config, declaration(family).causal_lm, DISTINCT.get(family, {}))
            for family in SUPPORTED if family != "kimi_linear"}


def source_config(family: str, **fields):
    """`fields` replace the shape's (another vocabulary, the tokenizer's special ids)."""
    config_class, _, extra = FAMILIES[family]
    return config_class(**SHAPE | extra | fields)


def source_model(family: str, seed: int = 0, **fields):
    """The family's own causal LM, random weights (norm gains randomised too, so no gain is trivially 1 or 0)."""
    _, model_class, _ = FAMILIES[family]
    torch.manual_seed(seed)
    model = model_class(source_config(family, **fields)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def attn_res_config(family: str, mode: str = "block", block_size: int = 2, **fields):
    config_class, _ = family_classes(family)
    own = {key: value for key, value in source_config(family).to_dict().items()
           if key not in ("model_type", "transformers_version", "architectures")}
    attn_res = dict(attn_res_mode=mode, attn_res_block_size=block_size if mode == "block" else 0)
    return config_class(**own | attn_res | fields)


def attn_res_model(family: str, mode: str = "block", block_size: int = 2, seed: int = 0, **fields):
    _, model_class = family_classes(family)
    torch.manual_seed(seed)
    return model_class(attn_res_config(family, mode, block_size, **fields)).eval()


def random_ids(batch: int = 2, seq: int = 9, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=generator)
