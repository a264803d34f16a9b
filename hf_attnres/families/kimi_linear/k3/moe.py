"""Kimi K3's latent MoE: Kimi Linear's MoE block (router, shared experts) with the routed experts in a narrower width.

out = up(norm(sum_k w_k * expert_k(down(x)))) + shared(x), where
- the router is Kimi Linear's own (K3's): sigmoid scores, + e_score_correction_bias for the choice only, grouped top-k,
  renormalised, times routed_scaling_factor; it reads the full-width x,
- down = `routed_expert_down_proj` (hidden -> routed_expert_hidden_size), up = `routed_expert_up_proj` (back),
- norm = `routed_expert_norm`, an RMSNorm at the latent width, only with `latent_moe_use_norm` (it reads the weighted
  sum of the experts, after the routing weights: SGLang's and Moonshot's order),
- the shared experts run at full width on the layer input x.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearMoE, KimiLinearRMSNorm

from .activation import K3Experts, SiTUMLP


class LatentMoE(KimiLinearMoE):
    def __init__(self, config):
        super().__init__(config)
        latent = config.routed_expert_hidden_size or config.hidden_size
        self.experts = K3Experts(config, latent)
        if config.hidden_act == "situ":
            self.shared_experts = SiTUMLP(config, config.moe_intermediate_size * config.n_shared_experts)
        self.latent = config.routed_expert_hidden_size is not None
        if self.latent:
            self.routed_expert_down_proj = nn.Linear(config.hidden_size, latent, bias=False)
            self.routed_expert_up_proj = nn.Linear(latent, config.hidden_size, bias=False)
            if config.latent_moe_use_norm:
                self.routed_expert_norm = KimiLinearRMSNorm(latent, eps=config.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        _, top_k_weights, top_k_index = self.gate(hidden_states)
        routed = hidden_states.view(-1, shape[-1])
        if self.latent:
            routed = self.routed_expert_down_proj(routed)
        routed = self.experts(routed, top_k_index, top_k_weights)
        if self.latent:
            if hasattr(self, "routed_expert_norm"):
                routed = self.routed_expert_norm(routed)
            routed = self.routed_expert_up_proj(routed)
        return routed.view(shape) + self.shared_experts(hidden_states)
