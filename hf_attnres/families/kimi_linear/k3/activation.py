"""SiTU-GLU, Kimi K3's gated activation (`hidden_act: "situ"`), in the dense MLP, the shared and the routed experts.

situ(gate, up) = beta * tanh(gate / beta) * sigmoid(gate) * lb * tanh(up / lb), in fp32, cast back to the input
dtype (beta = activation_situ_beta, lb = activation_situ_linear_beta; without lb the up half is used as is). As beta
grows it tends to SiLU(gate) * up: a SwiGLU whose two halves are soft-clipped to +-beta and +-lb.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.integrations.moe import use_experts_implementation
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearExperts, KimiLinearMLP


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta: float, linear_beta: float | None) -> torch.Tensor:
    dtype = gate.dtype
    gate, up = gate.float(), up.float()
    activated = beta * torch.tanh(gate / beta) * torch.sigmoid(gate)
    if linear_beta is not None:
        up = linear_beta * torch.tanh(up / linear_beta)
    return (activated * up).to(dtype)


class SiTUMLP(KimiLinearMLP):
    """Kimi Linear's MLP (dense layers and shared experts), with SiTU-GLU in place of SwiGLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(glu(self.config, self.gate_proj(x), self.up_proj(x)))


class SiTUPlaceholder(nn.Module):
    """`ACT2FN["situ"]`, registered so Kimi Linear's constructors accept `hidden_act: "situ"` (their modules are then
    replaced by the ones above, hf_attnres.families.kimi_linear.k3.install_k3). SiTU-GLU reads gate and up, so a
    one-input
    call is an error."""

    def forward(self, x):
        raise RuntimeError("SiTU-GLU reads both the gate and the up projection: use "
                           "hf_attnres.families.kimi_linear.k3.activation.situ_glu")


ACT2FN.setdefault("situ", SiTUPlaceholder)


def glu(config, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The model's gated activation: SiTU-GLU when `hidden_act == "situ"`, else act(gate) * up (Kimi Linear)."""
    if config.hidden_act == "situ":
        return situ_glu(gate, up, config.activation_situ_beta, config.activation_situ_linear_beta)
    return ACT2FN[config.hidden_act](gate) * up


@use_experts_implementation
class K3Experts(KimiLinearExperts):
    """Kimi Linear's fused experts at width `hidden_size` (K3's latent width), with the model's gated activation.

    transformers' fast experts implementations call `_apply_gate`; the eager loop below does too (Kimi Linear's own
    eager loop hard-codes act(gate) * up, which SiTU's clipped up half cannot be written as)."""

    def __init__(self, config, hidden_size: int | None = None):
        nn.Module.__init__(self)
        self.num_experts = config.num_local_experts
        self.hidden_dim = config.hidden_size if hidden_size is None else hidden_size
        self.intermediate_dim = config.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, self.intermediate_dim))
        self.act_fn = ACT2FN[config.hidden_act]

    def _apply_gate(self, gate_up_out: torch.Tensor) -> torch.Tensor:
        return glu(self.config, *gate_up_out.chunk(2, dim=-1))

    def forward(self, hidden_states, top_k_index, top_k_weights) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for expert in top_k_index.unique().tolist():
            token, slot = torch.where(top_k_index == expert)
            hidden = self._apply_gate(nn.functional.linear(hidden_states[token], self.gate_up_proj[expert]))
            hidden = nn.functional.linear(hidden, self.down_proj[expert]) * top_k_weights[token, slot, None]
            out.index_add_(0, token, hidden.to(out.dtype))
        return out
