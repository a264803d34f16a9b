"""Kimi K3's attention gates, on transformers' Kimi Linear attention modules.

- MLA output gate (`mla_use_output_gate`): attn_out * sigmoid(g_proj(x)) before `o_proj`, x the attention's input.
- KDA full-rank output gate (`linear_use_full_rank_gate`, K3's `use_full_rank_gate`): one `g_proj` (hidden ->
  heads * head_dim) feeds the gated output norm instead of the low-rank `g_b_proj(g_a_proj(x))`.
- KDA forget-gate lower bound (`linear_gate_lower_bound`, K3's `gate_lower_bound`: -5.0): the per-channel log-decay
  becomes g = lower_bound * sigmoid(exp(A_log) * (f + dt_bias)) (FLA's "safe gate"), so every step decays by at least
  exp(lower_bound) and at most 1, instead of -exp(A_log) * softplus(f + dt_bias). Both KDA paths (chunked and
  recurrent, fast kernels and transformers' PyTorch references) read this g, so the bound holds in all of them.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.models.kimi_linear.modeling_kimi_linear import (
    KimiLinearAttention,
    KimiLinearDeltaAttention,
    KimiLinearForgetGate,
)


class BoundedForgetGate(KimiLinearForgetGate):
    def __init__(self, config):
        super().__init__(config)
        self.lower_bound = config.linear_gate_lower_bound

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_shape = (*hidden_states.shape[:2], -1, self.head_dim)
        f = self.f_b_proj(self.f_a_proj(hidden_states))
        g = (f.float() + self.dt_bias.float().view(1, 1, -1)).view(hidden_shape)
        return self.lower_bound * torch.sigmoid(self.A_log.float().exp() * g)


class GatedOutputProj(nn.Linear):
    """`o_proj` that multiplies its input by the gate its attention set for this call (kept under K3's tensor name)."""

    gate: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, self.gate = self.gate, None
        return super().forward(x * torch.sigmoid(gate))


class GatedMLA(KimiLinearAttention):
    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.g_proj = nn.Linear(config.hidden_size, self.num_heads * self.v_head_dim, bias=False)
        self.o_proj = GatedOutputProj(self.num_heads * self.v_head_dim, config.hidden_size, bias=config.attention_bias)

    def forward(self, hidden_states, *args, **kwargs):
        self.o_proj.gate = self.g_proj(hidden_states)
        return super().forward(hidden_states, *args, **kwargs)


class K3DeltaAttention(KimiLinearDeltaAttention):
    """KDA with K3's optional full-rank output gate and bounded forget gate (SiLU short convolution, as Moonshot's)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        # transformers reuses hidden_act for the q/k/v short convolution; Moonshot's KDA (FLA's ShortConvolution)
        # always applies SiLU there, whatever the MLP's activation (SiTU-GLU is a two-input MLP activation)
        self.activation = "silu"
        if config.linear_gate_lower_bound is not None:
            self.forget_gate = BoundedForgetGate(config)
        if config.linear_use_full_rank_gate:
            # Kimi Linear's forward computes g_b_proj(g_a_proj(x)): g_a_proj becomes the identity, g_b_proj (a
            # property, below) K3's g_proj
            del self.g_a_proj, self.g_b_proj
            self.g_a_proj = nn.Identity()
            self.g_proj = nn.Linear(self.hidden_size, self.qkv_dim, bias=False)

    def __getattr__(self, name):
        if name == "g_b_proj" and "g_proj" in self._modules:
            return self._modules["g_proj"]
        return super().__getattr__(name)
