"""A tiny Llama GGUF file written in the test (F32 tensors, llama.cpp's tensor names and q/k layout, a made-up
vocabulary): what transformers' GGUF reader loads as the same model, so a convert from GGUF can be checked offline."""
from __future__ import annotations

from pathlib import Path

# transformers' names -> llama.cpp's
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}
PER_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def llama_cpp_rotary(tensor, heads: int):
    """llama.cpp's interleaved q/k rows (its converter's permute; transformers' reader undoes it)."""
    return tensor.reshape(heads, 2, tensor.shape[0] // heads // 2, *tensor.shape[1:]).swapaxes(1, 2) \
        .reshape(tensor.shape)


def write_llama_gguf(model, path: Path, **metadata) -> Path:
    """`model` (a LlamaForCausalLM, untied) as a GGUF file at `path`; `metadata` overrides a field the file states
    (block_count, head_count, rms_eps), as a damaged or hostile file would."""
    import gguf

    c = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_block_count(metadata.get("block_count", c.num_hidden_layers))
    writer.add_head_count(metadata.get("head_count", c.num_attention_heads))
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(metadata.get("rms_eps", c.rms_norm_eps))
    writer.add_vocab_size(c.vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>" for i in range(c.vocab_size)])
    writer.add_token_scores([0.0] * c.vocab_size)
    writer.add_token_types([1] * c.vocab_size)
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().float()
        if name in TOP:
            writer.add_tensor(TOP[name], tensor.numpy())
            continue
        layer, part = name.split(".")[2], ".".join(name.split(".")[3:-1])
        if part == "self_attn.q_proj":
            tensor = llama_cpp_rotary(tensor, c.num_attention_heads)
        elif part == "self_attn.k_proj":
            tensor = llama_cpp_rotary(tensor, c.num_key_value_heads)
        writer.add_tensor(f"blk.{layer}.{PER_LAYER[part]}.weight", tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
