"""Tiny random models of every supported family: the family's own config and causal LM, and the AttnRes ones."""
from __future__ import annotations

import torch
from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from transformers.models.gemma3.modeling_gemma3 import Gemma3ForCausalLM
from transformers.models.llama.modeling_llama import LlamaForCausalLM
from transformers.models.mistral.modeling_mistral import MistralForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

from attnres.families.registry import family_classes

VOCAB = 96
SHAPE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# each family with what distinguishes it switched on: sliding windows shorter than the test sequences (Mistral,
# Qwen2's upper layers, Gemma 3's local layers), q/k norms (Qwen3), Gemma's scaled embedding, post-norms, soft-capping
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "mistral": (MistralConfig, MistralForCausalLM, dict(sliding_window=4)),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(use_sliding_window=True, sliding_window=4, max_window_layers=2)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=8)),
    "gemma3_text": (Gemma3TextConfig, Gemma3ForCausalLM, dict(head_dim=8, sliding_window=4,
                                                              final_logit_softcapping=30.0)),
}


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
