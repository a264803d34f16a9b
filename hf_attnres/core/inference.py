"""Inference schedules of an AttnRes model of any family, kept out of the model files (each stays "the family, except
the residual"):

- `TwoPhaseSchedule`: the mixes of a no-grad block-mode forward (prefill or decode) as Phase 1 once per block (all the
  block's pseudo-queries against the completed blocks, the bank read once) and Phase 2 per sub-layer (online-softmax
  merge with the running partial sum, following RMSNorm fused). Equal to the plain loop up to fp32 rounding. On by
  default with the Triton backend only: on the PyTorch path (bank grown in place, `kernels/two_phase/lean.py`) it
  measured slower than the plain lean mix on CPU (docs/BENCHMARKS.md); off keeps inference bit-identical to training.
  Full mode keeps the plain per-point path: its bank grows by two sources per layer, so there is no block to batch.
- `chunked_causal_lm_forward`: a long prompt through the model in sequence chunks, carrying the family's cache (its
  attention keys and values, and any recurrent state), so the depth bank only ever holds chunk-sized tensors. Logits
  and cache equal the unchunked forward.
"""
from __future__ import annotations

import torch

from ..kernels.mix import use_triton
from ..kernels.two_phase import DepthBank, phase1, phase2
from .depth_layout import DepthLayout
from .input_checks import check_chunk_size
from .offload import onloaded


class TwoPhaseSchedule:
    """Serves `mix` for every mix point of one block-mode forward; caches Phase 1 of the current block.

    Sub-layer queries of block b (layers [bS, min(bS+S, L))): attention and MLP of each layer, plus the final output
    mix in the last block. The bank of block b is what the block's first attention mix sees (embedding + the b
    completed block sums); every later mix of the block sees bank + [partial sum].
    """

    def __init__(self, model, backend: str):
        self.model = model
        self.backend = backend
        self.layout = DepthLayout.of(model.config)
        self.num_layers = self.layout.num_layers
        self.block = None
        self.rows: dict[tuple[int, str], int] = {}
        self.bank_out = self.bank_lse = None
        self.depth_bank = None  # PyTorch path: the completed blocks, grown in place (hf_attnres/core/depth_layout.py)

    def mix_points(self, block: int):
        """(index, owning module, point) of every mix point of `block`: the layers', then the output mix at the end."""
        owner = lambda i: self.model.layers[i] if i < self.num_layers else self.model  # noqa: E731
        return [(i, owner(i), name) for i, name in self.layout.block_mix_points(block)]

    def run_phase1(self, block: int, bank: tuple[torch.Tensor, ...]) -> None:
        points = self.mix_points(block)
        self.rows = {(index, name): row for row, (index, _, name) in enumerate(points)}
        modules = [getattr(owner, f"{name}_res_{part}") for _, owner, name in points for part in ("norm", "proj")]
        with onloaded(*modules):  # big-model offload: the block's mix tensors, read directly
            queries = torch.stack([owner.res_query(name) for _, owner, name in points])
            norms = torch.stack([getattr(owner, f"{name}_res_norm").weight for _, owner, name in points])
        eps = getattr(points[0][1], f"{points[0][2]}_res_norm").variance_epsilon
        if not use_triton(self.backend, bank[0]):
            if self.depth_bank is None:
                self.depth_bank = DepthBank(self.layout.bank_capacity, eps)
            self.depth_bank.extend(bank)
            bank = self.depth_bank
        self.bank_out, self.bank_lse = phase1(bank, queries, norms, eps, backend=self.backend)
        self.block = block

    def mix(self, owner, point: str, sources: tuple[torch.Tensor, ...], out_norm=None) -> torch.Tensor:
        """The mix of `owner`'s `point` over `sources` (and `out_norm` = (weight, eps) applied after it, fused)."""
        index = getattr(owner, "layer_idx", self.num_layers)
        block = self.layout.block_of(index)
        opens = point == "self_attention" and self.layout.opens_source(index)
        bank, partial = (sources, None) if opens else (sources[:-1], sources[-1])
        if block != self.block:
            self.run_phase1(block, bank)
        row = self.rows[(index, point)]
        norm = getattr(owner, f"{point}_res_norm")
        return phase2(
            self.bank_out[row], self.bank_lse[row], partial, owner.res_query(point), norm.weight, norm.variance_epsilon,
            sources[0].dtype, backend=self.backend, out_norm=out_norm,
        )


def two_phase_schedule(model, hidden_states: torch.Tensor, output_attn_res_weights: bool) -> TwoPhaseSchedule | None:
    """The schedule for this forward, or None for the plain path: training (a gradient is needed), standard or full
    mode, or when per-source weights are asked for (Phase 1 keeps only their log-sum-exp).

    `config.attn_res_two_phase`: True / False force it on / off; unset, it follows the kernel
    backend: on with Triton, off with the PyTorch reference, whose plain loop then stays bit-identical to training.
    """
    config = model.config
    if torch.is_grad_enabled() or output_attn_res_weights or config.attn_res_mode != "block":
        return None
    backend = config.resolved_backend()
    enabled = config.attn_res_two_phase
    if enabled is None:
        enabled = use_triton(backend, hidden_states)
    return TwoPhaseSchedule(model, backend) if enabled else None


def chunked_causal_lm_forward(model, input_ids=None, inputs_embeds=None, attention_mask=None, cache=None,
                              chunk_size: int = 4096, logits_to_keep: int | torch.Tensor = 0, **kwargs):
    """`model(...)` (an AttnRes causal LM) over the prompt in chunks of `chunk_size` tokens, cache carried.

    Only the hidden states the logits need are kept (`logits_to_keep`: 0 = all, k = the last k tokens).
    """
    from transformers.cache_utils import DynamicCache

    if kwargs.get("labels") is not None:
        raise ValueError("prefill_chunk_size does not compute a loss: pass labels to an unchunked forward")
    kwargs.pop("labels", None)
    check_chunk_size(chunk_size)
    if kwargs.get("output_attn_res_weights") or kwargs.get("output_hidden_states"):
        raise ValueError("prefill_chunk_size does not collect per-layer outputs: run an unchunked forward for those")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError("prefill_chunk_size needs a 2-D attention_mask [batch, past + seq] (it is cut per chunk)")
    reference = input_ids if input_ids is not None else inputs_embeds
    seq_len = reference.shape[1]
    cache = cache if cache is not None else DynamicCache(config=model.config)
    past = int(cache.get_seq_length())  # a tensor where a linear-attention layer counts it (transformers 5.24+)
    keep_from = seq_len - logits_to_keep if isinstance(logits_to_keep, int) and logits_to_keep > 0 else 0
    position_ids = kwargs.pop("position_ids", None)
    kept = []
    for start in range(0, seq_len, chunk_size):
        end = min(start + chunk_size, seq_len)
        outputs = model.model(
            position_ids=position_ids[:, start:end] if position_ids is not None else None,
            input_ids=input_ids[:, start:end] if input_ids is not None else None,
            inputs_embeds=inputs_embeds[:, start:end] if inputs_embeds is not None else None,
            attention_mask=attention_mask[:, : past + end] if attention_mask is not None else None,
            cache=cache,
            use_cache=True,
            **kwargs,
        )
        if end > keep_from:
            kept.append(outputs.last_hidden_state[:, max(keep_from - start, 0) :])
    hidden_states = torch.cat(kept, dim=1)
    if isinstance(logits_to_keep, torch.Tensor):
        hidden_states = hidden_states[:, logits_to_keep]
    return model.lm_head(hidden_states), cache
