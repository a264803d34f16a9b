"""An independent reference for the model, written line by line from Kimi K3's pseudo-code.

It drives transformers' own sub-modules of a built model (attention, MLP/MoE, norms) but none of attnres' mixing or
bookkeeping code, so a parity test against it checks the AttnRes wiring itself.
"""
import torch

from hf_attnres.core.cache_arg import cache_kwargs


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


class KimiSublayers:
    """Kimi Linear's sub-layers, from transformers' modules: KDA or MLA attention, MLP or MoE, one mask per type."""

    def __init__(self, model, embeds):
        from transformers.masking_utils import create_causal_mask, create_recurrent_attention_mask

        self.model = model
        kwargs = dict(
            config=model.config, inputs_embeds=embeds, attention_mask=None, **cache_kwargs(None),
            position_ids=torch.arange(embeds.shape[1]).unsqueeze(0),
        )
        self.masks = {"full_attention": create_causal_mask(**kwargs),
                      "linear_attention": create_recurrent_attention_mask(**kwargs)}

    def attention(self, i, x):
        layer = self.model.layers[i]
        h, mask = layer.input_layernorm(x), self.masks[self.model.config.layer_types[i]]
        if layer.block_type == "linear_attention":
            return layer.self_attn(hidden_states=h, cache_params=None, attention_mask=mask)
        position_ids = torch.arange(x.shape[1]).unsqueeze(0)
        return layer.self_attn(hidden_states=h, attention_mask=mask, position_ids=position_ids)[0]

    def mlp(self, i, x):
        layer = self.model.layers[i]
        return layer.mlp(layer.post_attention_layernorm(x))

    def logits(self, causal_lm, x):
        return causal_lm.lm_head(self.model.norm(x))


class RotarySublayers:
    """A rotary PreNorm family's sub-layers, from transformers' modules: the attention with its rotary embedding and
    its (causal or sliding-window) mask per layer, the MLP, each on its pre-norm; Gemma 3's post-norms end a
    sub-layer's output and its final logits are soft-capped. Phi-3's residual dropouts are off (eval)."""

    def __init__(self, model, embeds):
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        config = self.config = model.config
        self.model = model
        self.position_ids = torch.arange(embeds.shape[1]).unsqueeze(0)
        kwargs = dict(config=config, inputs_embeds=embeds, attention_mask=None, **cache_kwargs(None),
                      position_ids=self.position_ids)
        sliding = getattr(config, "sliding_window", None) is not None
        self.types = list(getattr(config, "layer_types", None) or
                          ["sliding_attention" if sliding else "full_attention"] * config.num_hidden_layers)
        build = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
        self.masks = {kind: build[kind](**kwargs) for kind in set(self.types)}
        self.gemma = hasattr(model.layers[0], "pre_feedforward_layernorm")
        if self.gemma:  # local and global layers: a rotary base each
            self.rotary = {kind: model.rotary_emb(embeds, self.position_ids, kind) for kind in set(self.types)}
        else:
            self.rotary = dict.fromkeys(set(self.types), model.rotary_emb(embeds, self.position_ids))

    def attention(self, i, x):
        layer, kind = self.model.layers[i], self.types[i]
        out = layer.self_attn(hidden_states=layer.input_layernorm(x), attention_mask=self.masks[kind],
                              position_embeddings=self.rotary[kind], position_ids=self.position_ids)[0]
        return layer.post_attention_layernorm(out) if self.gemma else out

    def mlp(self, i, x):
        layer = self.model.layers[i]
        if self.gemma:
            return layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(x)))
        return layer.mlp(layer.post_attention_layernorm(x))

    def logits(self, causal_lm, x):
        logits = causal_lm.lm_head(self.model.norm(x))
        cap = getattr(self.config, "final_logit_softcapping", None)
        return logits if cap is None else torch.tanh(logits / cap) * cap


def reference_logits(causal_lm, input_ids, sublayers=KimiSublayers, mode=None):
    """Logits and the list of every mix's weights (None where a sub-layer reads a single source). `sublayers`: the
    family's sub-layers without their residual adds, built from (base model, embeddings). `mode`: the residual rule
    to run (the config's when None; "standard" gives the plain residual stream over the same weights)."""
    model, config = causal_lm.model, causal_lm.config
    h = model.embed_tokens(input_ids)
    run = sublayers(model, h)
    weights = []
    mode = mode or config.attn_res_mode
    if mode == "block":
        S = config.attn_res_block_size
        bank, prefix = [], h
        for i, layer in enumerate(model.layers):
            if bank:
                x, p = mix(bank + [prefix], layer, "self_attention")
                weights.append(p)
            else:
                x = prefix
                weights.append(None)
            if i % S == 0:
                bank.append(prefix)
                prefix = None
            a = run.attention(i, x)
            prefix = a if prefix is None else prefix + a
            x, p = mix(bank + [prefix], layer, "mlp")
            weights.append(p)
            prefix = prefix + run.mlp(i, x)
        x, p = mix(bank + [prefix], model, "output_attn")
        weights.append(p)
    elif mode == "full":
        outputs = [h]
        for i, layer in enumerate(model.layers):
            if len(outputs) > 1:
                x, p = mix(outputs, layer, "self_attention")
            else:
                x, p = outputs[0], None
            weights.append(p)
            outputs.append(run.attention(i, x))
            x, p = mix(outputs, layer, "mlp")
            weights.append(p)
            outputs.append(run.mlp(i, x))
        x, p = mix(outputs, model, "output_attn")
        weights.append(p)
    else:
        x = h
        for i in range(len(model.layers)):
            x = x + run.attention(i, x)
            x = x + run.mlp(i, x)
    return run.logits(causal_lm, x), weights


def assert_matches_reference(model, input_ids, num_layers: int, weights_atol: float = 1e-5,
                             sublayers=KimiSublayers) -> None:
    """The model's logits and every mix's weights (fp32) equal the reference loop's; a single-source mix weighs 1."""
    with torch.no_grad():
        out = model(input_ids, use_cache=False, output_attn_res_weights=True)
        expected, expected_weights = reference_logits(model, input_ids, sublayers)
    torch.testing.assert_close(out.logits, expected, rtol=1e-5, atol=1e-5)
    assert len(out.attn_res_weights) == 2 * num_layers + 1
    for got, want in zip(out.attn_res_weights, expected_weights):
        if want is None:  # a single source: weight exactly one
            assert got.shape[-1] == 1 and torch.all(got == 1)
        else:
            # fp32 reassociation: the PyTorch path scores r * (v . w) where the pseudo-code sums (v * r) * w
            torch.testing.assert_close(got, want.movedim(0, -1), rtol=1e-5, atol=weights_atol)
