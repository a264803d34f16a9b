"""An independent reference for the model, written line by line from Kimi K3's pseudo-code (issue 2).

It drives transformers' own sub-modules of a built model (attention, MLP/MoE, norms) but none of attnres' mixing or
bookkeeping code, so a parity test against it checks the AttnRes wiring itself.
"""
import torch


def mix(sources, owner, point):
    """The mix at `owner`'s `point`, written from the paper's definitions, ablations included (section 5.3)."""
    config = owner.config
    v = torch.stack(sources).float()  # [n, ..., d]
    if config.attn_res_static_mixing:  # DenseFormer-style: one learned logit per source, whatever the input
        score = getattr(owner, f"{point}_res_logits").weight.float()
        score = score.reshape(-1, *[1] * (v.dim() - 2)).expand(v.shape[:-1])
    else:
        q = getattr(owner, f"{point}_res_proj").weight[0]
        if config.attn_res_key_norm:
            norm = getattr(owner, f"{point}_res_norm")
            k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
            score = (k * (norm.weight * q)).sum(-1)
        else:  # no RMSNorm on the keys: raw sources scored
            score = (v * q).sum(-1)
    p = torch.softmax(score, dim=0) if config.attn_res_score == "softmax" else torch.sigmoid(score)
    return (p.unsqueeze(-1) * v).sum(0).to(sources[0].dtype), p


def run_attention(layer, x, attention_mask):
    if layer.block_type == "linear_attention":
        return layer.self_attn(hidden_states=x, cache_params=None, attention_mask=attention_mask)
    position_ids = torch.arange(x.shape[1]).unsqueeze(0)
    return layer.self_attn(hidden_states=x, attention_mask=attention_mask, position_ids=position_ids)[0]


def masks_for(model, embeds):
    from transformers.masking_utils import create_causal_mask, create_recurrent_attention_mask

    kwargs = dict(
        config=model.config, inputs_embeds=embeds, attention_mask=None, past_key_values=None,
        position_ids=torch.arange(embeds.shape[1]).unsqueeze(0),
    )
    return {"full_attention": create_causal_mask(**kwargs),
            "linear_attention": create_recurrent_attention_mask(**kwargs)}


def reference_logits(causal_lm, input_ids):
    """Logits and the list of every mix's weights (None where a sub-layer reads a single source)."""
    model, config = causal_lm.model, causal_lm.config
    h = model.embed_tokens(input_ids)
    masks = masks_for(model, h)
    weights = []
    layers = model.layers
    if config.attn_res_mode == "block":
        S = config.attn_res_block_size
        bank, prefix = [], h
        for i, layer in enumerate(layers):
            mask = masks[config.layer_types[i]]
            if bank:
                x, p = mix(bank + [prefix], layer, "self_attention")
                weights.append(p)
            else:
                x = prefix
                weights.append(None)
            if i % S == 0:
                bank.append(prefix)
                prefix = None
            a = run_attention(layer, layer.input_layernorm(x), mask)
            prefix = a if prefix is None else prefix + a
            x, p = mix(bank + [prefix], layer, "mlp")
            weights.append(p)
            prefix = prefix + layer.mlp(layer.post_attention_layernorm(x))
        x, p = mix(bank + [prefix], model, "output_attn")
        weights.append(p)
    elif config.attn_res_mode == "full":
        outputs = [h]
        for i, layer in enumerate(layers):
            mask = masks[config.layer_types[i]]
            if len(outputs) > 1:
                x, p = mix(outputs, layer, "self_attention")
            else:
                x, p = outputs[0], None
            weights.append(p)
            outputs.append(run_attention(layer, layer.input_layernorm(x), mask))
            x, p = mix(outputs, layer, "mlp")
            weights.append(p)
            outputs.append(layer.mlp(layer.post_attention_layernorm(x)))
        x, p = mix(outputs, model, "output_attn")
        weights.append(p)
    else:
        x = h
        for i, layer in enumerate(layers):
            x = x + run_attention(layer, layer.input_layernorm(x), masks[config.layer_types[i]])
            x = x + layer.mlp(layer.post_attention_layernorm(x))
    return causal_lm.lm_head(model.norm(x)), weights


def assert_matches_reference(model, input_ids, num_layers: int, weights_atol: float = 1e-5) -> None:
    """The model's logits and every mix's weights (fp32) equal the reference loop's; a single-source mix weighs 1."""
    with torch.no_grad():
        out = model(input_ids, use_cache=False, output_attn_res_weights=True)
        expected, expected_weights = reference_logits(model, input_ids)
    torch.testing.assert_close(out.logits, expected, rtol=1e-5, atol=1e-5)
    assert len(out.attn_res_weights) == 2 * num_layers + 1
    for got, want in zip(out.attn_res_weights, expected_weights):
        if want is None:  # a single source: weight exactly one
            assert got.shape[-1] == 1 and torch.all(got == 1)
        else:
            # fp32 reassociation: the PyTorch path scores r * (v . w) where the pseudo-code sums (v * r) * w
            torch.testing.assert_close(got, want.movedim(0, -1), rtol=1e-5, atol=weights_atol)
