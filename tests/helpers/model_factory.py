"""Tiny models for the tests, with AttnRes parameters moved away from their init so the depth softmax is not uniform."""
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.utils.tiny import tiny_config


def perturb_attn_res(model, scale=1.0, seed=1):
    """Random pseudo-queries and norm gains: a zero query makes every mix a plain average, which hides wiring bugs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "_res_proj" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
            elif "_res_norm" in name:
                param.copy_(1 + 0.3 * torch.randn(param.shape, generator=generator))
            elif "_res_gate" in name:  # the gated read's gate (zero: the read is the plain stream)
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))
    return model


def tiny_model(mode="block", block_size=2, num_layers=5, dtype=torch.float32, seed=0, **overrides):
    torch.manual_seed(seed)
    model = KimiLinearAttnResForCausalLM(tiny_config(mode, block_size, num_layers, **overrides, family="kimi_linear"))
    return perturb_attn_res(model).to(dtype).eval()


def random_ids(batch=2, seq=12, vocab=256, seed=0):
    return torch.randint(3, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def greedy_without_cache(model, ids, steps):
    for _ in range(steps):
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids
