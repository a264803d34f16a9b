"""Kimi K3's published text config (moonshotai/Kimi-K3 config.json, `text_config`), for planning without a download.

Values as public ports of K3 quote the file (SGLang's K3 support, llama.cpp's converter, third-party config parsers);
the checkpoint itself was not read here. `hf_attnres.training.memory_plan` and docs/K3.md's memory table use it.
"""
from __future__ import annotations

NUM_LAYERS = 93
# 1-indexed like the file: an MLA layer every fourth, and the last one; KDA elsewhere (24 MLA, 69 KDA)
FULL_ATTN_LAYERS = [*range(4, NUM_LAYERS, 4), NUM_LAYERS]

K3_TEXT_CONFIG = {
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "attn_res_block_size": 12,
    "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839, "dtype": "bfloat16",
    "first_k_dense_replace": 1, "hidden_act": "situ", "hidden_size": 7168, "initializer_range": 0.02,
    "intermediate_size": 33792, "kv_lora_rank": 512, "latent_moe_use_norm": True, "max_position_embeddings": 1048576,
    "mla_use_nope": True, "mla_use_output_gate": True, "model_type": "kimi_linear", "moe_intermediate_size": 3072,
    "moe_layer_freq": 1, "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_attention_heads": 96,
    "num_expert_group": 1, "num_experts": 896, "num_experts_per_token": 16, "num_hidden_layers": NUM_LAYERS,
    "num_key_value_heads": 96, "num_nextn_predict_layers": 0, "num_shared_experts": 2, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-5, "routed_expert_hidden_size": 3584,
    "routed_scaling_factor": 1.0, "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
    "use_cache": True, "use_grouped_topk": True, "v_head_dim": 128, "vocab_size": 163840,
    "linear_attn_config": {
        "full_attn_layers": FULL_ATTN_LAYERS,
        "kda_layers": [i for i in range(1, NUM_LAYERS + 1) if i not in FULL_ATTN_LAYERS],
        "head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
        "use_full_rank_gate": True,
    },
    "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"},
}


def k3_config_dict() -> dict:
    import copy

    return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
            "text_config": copy.deepcopy(K3_TEXT_CONFIG)}
