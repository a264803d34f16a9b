"""Plain PyTorch references for Kimi K3's pieces, written from the formulas (README "Kimi K3"), not from
hf_attnres/families/kimi_linear/k3.

They read a built module's weights but none of its forward code; float64 where it is cheap.
"""
import torch
from torch.nn import functional as F


def situ(gate, up, beta, linear_beta):
    g, u = gate.double(), up.double()
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * linear_beta * torch.tanh(u / linear_beta)


def router(x, weight, bias, top_k, n_group, topk_group, scale):
    """Sigmoid scores; bias for the choice only; groups ranked by their top-2 sum; renormalised; scaled."""
    scores = torch.sigmoid(x.double() @ weight.double().T)
    choice = scores + bias.double()
    groups = choice.view(len(x), n_group, -1)
    group_score = groups.topk(2, dim=-1).values.sum(-1)
    keep = torch.zeros_like(group_score).scatter(1, group_score.topk(topk_group, dim=-1).indices, 1.0)
    choice = choice.masked_fill(~keep.bool().repeat_interleave(groups.shape[-1], dim=1), float("-inf"))
    index = choice.topk(top_k, dim=-1).indices
    w = scores.gather(1, index)
    return index, w / w.sum(-1, keepdim=True) * scale


def situ_mlp(x, mlp, config):
    hidden = situ(F.linear(x, mlp.gate_proj.weight), F.linear(x, mlp.up_proj.weight), config.activation_situ_beta,
                  config.activation_situ_linear_beta)
    return F.linear(hidden.to(x.dtype), mlp.down_proj.weight)


def latent_moe(x, moe, config):
    """up(norm(sum_k w_k expert_k(down(x)))) + shared(x), token by token."""
    flat = x.reshape(-1, x.shape[-1])
    index, w = router(flat, moe.gate.weight, moe.gate.e_score_correction_bias, config.num_experts_per_tok,
                      config.n_group, config.topk_group, config.routed_scaling_factor)
    latent = flat @ moe.routed_expert_down_proj.weight.T
    routed = torch.zeros_like(latent)
    for t in range(len(flat)):
        for k in range(index.shape[1]):
            e = index[t, k]
            gate, up = F.linear(latent[t], moe.experts.gate_up_proj[e]).chunk(2)
            hidden = situ(gate, up, config.activation_situ_beta, config.activation_situ_linear_beta).to(x.dtype)
            routed[t] += w[t, k].to(x.dtype) * F.linear(hidden, moe.experts.down_proj[e])
    if config.latent_moe_use_norm:
        norm = moe.routed_expert_norm
        routed = norm.weight * routed * torch.rsqrt(routed.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    out = routed @ moe.routed_expert_up_proj.weight.T + situ_mlp(flat, moe.shared_experts, config)
    return out.view_as(x)
