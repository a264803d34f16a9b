"""The two-phase inference schedule of a block-mode AttnRes model of any family: a feature of the installed package
(`hf_attnres.core.installed` hands `two_phase_schedule` to the model classes), not of a saved folder's code.

`TwoPhaseSchedule` computes the mixes of a no-grad block-mode forward (prefill or decode) as Phase 1 once per block
(all the block's pseudo-queries against the completed blocks, the bank read once) and Phase 2 per sub-layer
(online-softmax merge with the running partial sum, following RMSNorm fused). Equal to the plain loop up to fp32
rounding. On by default with the Triton backend only: on the PyTorch path (bank grown in place,
`kernels/two_phase/lean.py`) it measured slower than the plain lean mix on CPU (docs/BENCHMARKS.md); off keeps
inference bit-identical to training. Full mode keeps the plain per-point path: its bank grows by two sources per
layer, so there is no block to batch. A folder's code loaded without the package runs the plain loop, which the
schedule equals up to fp32 rounding.
"""
from __future__ import annotations

import torch

from ..kernels.mix import use_triton
from ..kernels.two_phase import DepthBank, phase1, phase2
from .depth_layout import MIX_POINTS, OUTPUT_POINT, DepthLayout
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

    def block_of(self, index: int) -> int:
        """The block of layer `index` (the output mix, index = num_layers, belongs to the last block)."""
        return min(index, self.num_layers - 1) // self.layout.block_size

    def mix_points(self, block: int):
        """(index, owning module, point) of every mix point of `block`, in order: the layers', then the output mix at
        the end of the last block."""
        first = block * self.layout.block_size
        layers = range(first, min(first + self.layout.block_size, self.num_layers))
        points = [(i, self.model.layers[i], point) for i in layers for point in MIX_POINTS]
        if layers.stop == self.num_layers:
            points.append((self.num_layers, self.model, OUTPUT_POINT))
        return points

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
                # the most completed sources the bank holds: the embedding and every block sum
                self.depth_bank = DepthBank(self.layout.num_blocks + 1, eps)
            self.depth_bank.extend(bank)
            bank = self.depth_bank
        self.bank_out, self.bank_lse = phase1(bank, queries, norms, eps, backend=self.backend)
        self.block = block

    def mix(self, owner, point: str, sources: tuple[torch.Tensor, ...], out_norm=None) -> torch.Tensor:
        """The mix of `owner`'s `point` over `sources` (and `out_norm` = (weight, eps) applied after it, fused)."""
        index = getattr(owner, "layer_idx", self.num_layers)
        block = self.block_of(index)
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
