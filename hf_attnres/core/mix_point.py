"""A mix point: the learned softmax over depth before a sub-layer (and before the final norm), and its tensors.

Kimi K3's tensors, on the module that owns the point: `{point}_res_norm` (the keys' RMSNorm gain) and
`{point}_res_proj` (the pseudo-query). The paper's ablations (config switches `attn_res_static_mixing`,
`attn_res_score`, `attn_res_key_norm`) own other tensors and mix through the plain PyTorch reference op
(`hf_attnres.core.ablations`, which registers them here); with every switch at its default the model, its tensor
names and its fast paths are untouched.
"""
from dataclasses import dataclass

import torch
from torch import nn

from hf_attnres.core.offload import onloaded
from hf_attnres.kernels.mix.depth_mix import AttnResDepthMix


@dataclass(frozen=True)
class MixSettings:
    """The config's switches a mix point reads, resolved once per forward (`of`) and handed to every point: a config
    attribute costs ~1.5 us (transformers' `PretrainedConfig.__getattribute__`), and a decode step of one token runs
    2L+1 mix points that each read five of them."""

    mode: str
    ablation: bool
    fuse_norm: bool
    backend: str
    recompute: bool
    gated: bool = False  # the gated read; `ablation` is then True too

    @classmethod
    def of(cls, config) -> "MixSettings":
        # the gated read takes the ablations' branch of `mix`, so the default mix tests one flag, not two
        gated = config.attn_res_gated_read
        return cls(config.attn_res_mode, config.attn_res_ablation or gated, config.attn_res_fuse_norm,
                   config.resolved_backend(), config.attn_res_recompute, gated)


class PseudoQuery(nn.Linear):
    """A mix point's learned depth query, Linear(hidden, 1, bias=False) as in K3. Zero at init: uniform softmax."""

    def __init__(self, hidden_size: int):
        super().__init__(hidden_size, 1, bias=False)

    def reset_parameters(self) -> None:
        # zero without a random draw: the AttnRes modules take nothing from the RNG stream, so with one seed every
        # shared weight of a standard / block / full model starts identical (a matched pair)
        nn.init.zeros_(self.weight)


class DepthKeyNorm(nn.Module):
    """The keys' RMSNorm of a mix point (`{point}_res_norm`): transformers' Llama-formula RMSNorm,
    `weight * (x * rsqrt(mean(x^2) + eps)).to(dtype)` with the mean taken in fp32, its gain `weight` [hidden] and its
    `variance_epsilon` read directly by the mix kernels. Its own class so that `_init_weights` can start its gain at
    `config.attn_res_key_norm_init` (1.0 as K3; a study arm varies it: the gain scales every score, a temperature of
    the depth softmax)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class AttnResMixing:
    """The mix at one point: its RMSNorm gain (keys) and pseudo-query live on the owning module as
    `{point}_res_norm` / `{point}_res_proj` (K3's tensor names).

    `fusable_norm`, the family's norm policy: its RMSNorm class when that norm's formula is transformers' Llama one
    (`weight * (x * rsqrt(mean(x^2) + eps)).to(dtype)`), which a mix kernel may then apply fused after the mix; None
    when it is another formula (Gemma's `(1 + weight)`), applied after the mix as its own module."""

    fusable_norm: type | None = None
    # The config-switched features, set by their code at its import (None in a folder whose config uses none):
    # `ablation_point(owner, point, config)` / `gate_point(...)` add an ablated point's tensors / a point's gate;
    # `ablation_mix(owner, point, sources, weights, out_norm)` / `gated_mix(...)` mix through them
    ablation_point = ablation_mix = gate_point = gated_mix = None

    def add_mix_point(self, point: str, config) -> None:
        if config.attn_res_ablation:  # the paper's ablations own other tensors
            return self.ablation_point(self, point, config)
        setattr(self, f"{point}_res_norm", DepthKeyNorm(config.hidden_size, eps=config.rms_norm_eps))
        setattr(self, f"{point}_res_proj", PseudoQuery(config.hidden_size))
        if "attn_res_mix" not in self._modules:  # the owner's points share one (stateless) kernelizable mix
            self.attn_res_mix = AttnResDepthMix()
        if config.attn_res_gated_read:
            self.gate_point(self, point, config)

    def res_query(self, point: str) -> torch.Tensor:
        """The pseudo-query vector [hidden] of `point`. When an adapter library has wrapped the `PseudoQuery` (PEFT
        LoRA on `*_res_proj`), the query is read through the wrapper's forward, applied to the identity, so the
        adapter's delta takes part in the mix and trains (reading `.weight` would silently ignore it)."""
        proj = getattr(self, f"{point}_res_proj")
        if type(proj) is PseudoQuery:
            return proj.weight[0]
        eye = torch.eye(self.config.hidden_size, dtype=proj.weight.dtype, device=proj.weight.device)
        return proj(eye)[:, 0]

    def single_source_mix(self, point: str, source: torch.Tensor, weights: list | None, out_norm=None,
                          settings: MixSettings | None = None) -> torch.Tensor:
        """A mix over one source (layer 0's attention point): softmax over a single score is exactly 1 whatever the
        score, so the mix is the source itself (K3 skips it). Without autograd it is skipped here too. While autograd
        records, the weight is computed as softmax([score]) from the point's own tensors: still exactly 1.0 (the
        output is bit-identical) and its derivative is exactly 0, so the K3-named tensors take part in the graph with
        their true gradient, zero: DDP needs no find_unused_parameters, gradient checkpointing and optimizers see a
        gradient for every parameter. Cost: one elementwise multiply (the score is a dot product of two vectors)."""
        mode = settings.mode if settings is not None else self.config.attn_res_mode
        if torch.is_grad_enabled() and mode != "standard":  # standard mode has no mix tensors
            norm = getattr(self, f"{point}_res_norm")
            with onloaded(norm, getattr(self, f"{point}_res_proj")):
                score = (norm.weight.float() * self.res_query(point).float()).sum()
            source = source * score.reshape(1).softmax(0).to(source.dtype)
        if weights is not None:
            weights.append(source.new_ones(*source.shape[:-1], 1, dtype=torch.float32))
        return source if out_norm is None else out_norm(source)

    def mix(
        self, point: str, sources: tuple[torch.Tensor, ...], weights: list | None, out_norm=None, schedule=None,
        settings: MixSettings | None = None,
    ) -> torch.Tensor:
        """The mix, then `out_norm` (the RMSNorm that reads it) when given: fused into the op where possible.
        `schedule`: the installed package's two-phase schedule of a no-grad forward, or None. `settings`: the
        config's switches, resolved once per forward by the model (`MixSettings.of(config)` here when not given).
        The mix itself is the owner's `attn_res_mix` module, which a mapped kernel replaces (`kernels.kernelize`).
        Written for the one-token decode step, where this Python is most of the cost: no config reads, the point's
        modules read from `_modules` (nn.Module.__getattr__ is a failing dict lookup first)."""
        settings = settings or MixSettings.of(self.config)
        if settings.ablation:  # the paper's ablations: a plain PyTorch reference op, no fused kernel
            if settings.gated:  # not an ablation: the stream plus the gated mix
                return self.gated_mix(self, point, sources, weights, out_norm)
            return self.ablation_mix(self, point, sources, weights, out_norm)
        if len(sources) == 1:
            return self.single_source_mix(point, sources[0], weights, out_norm, settings)
        # only the family's own RMSNorm is fused: a replaced norm module keeps its forward
        fused = settings.fuse_norm and out_norm is not None and type(out_norm) is self.fusable_norm
        modules = self._modules
        norm, proj = modules[point + "_res_norm"], modules[point + "_res_proj"]
        # tensors read directly, not through a forward: loaded here under big-model offload (`onloaded`)
        with onloaded(norm, proj, out_norm if fused else None):
            if schedule is not None:
                fused_norm = (out_norm.weight, out_norm.variance_epsilon) if fused else None
                mixed = schedule.mix(self, point, sources, out_norm=fused_norm)
                return mixed if out_norm is None or fused else out_norm(mixed)
            # the query's Linear weight [1, hidden] as it is (the kernels take it); an adapter's wrapper is read through
            query = proj.weight if type(proj) is PseudoQuery else self.res_query(point)
            # its `forward`, the one a kernel mapping bound (an instance attribute) or the module's own: called
            # directly, as it holds no tensors and takes no hooks (nn.Module.__call__ would cost a decode step's 2L+1
            # mix points a few microseconds each)
            mixed = modules["attn_res_mix"].forward(
                sources, query, norm.weight, norm.variance_epsilon, weights is not None,
                out_norm.weight if fused else None, out_norm.variance_epsilon if fused else 1e-6,
                settings.backend, settings.recompute,
            )
        if weights is not None:
            mixed, probs = mixed
            weights.append(probs)
        return mixed if out_norm is None or fused else out_norm(mixed)



__all__ = ["MixSettings", "PseudoQuery", "DepthKeyNorm", "AttnResMixing"]
