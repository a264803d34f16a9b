"""Depth diagnostics (the paper's Figure 5 view), recorded every N steps into `diagnostics.jsonl`:

- layer_rms:        RMS of each decoder layer's output, i.e. the last depth source it leaves (standard: the residual
                    stream; block: the block's running sum; full: the layer's MLP output). PreNorm dilution shows as
                    growth with depth in standard mode.
- layer_grad_norm:  L2 norm of the gradient of each decoder layer's parameters (before clipping).
- depth_weights:    per mix point (layer 0 attention, layer 0 MLP, ..., output), the depth-softmax weight of each
                    source averaged over batch and positions (the model returns them with output_attn_res_weights).
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

from .metrics import JsonlLog

DIAGNOSTICS_FILE = "diagnostics.jsonl"


class DepthDiagnostics:
    """Wrap each forward of a diagnosed step in `capture()`; then `record()` after the last backward.

    Statistics are averaged over the step's micro-batches and processes: the global batch, as one process would see it.
    """

    def __init__(self, module, output_dir: Path, every: int, enabled_writer: bool, resume_step: int):
        self.model = module.model  # the decoder stack of a ForCausalLM
        self.mode = module.config.attn_res_mode
        self.every = every
        self.log = JsonlLog(Path(output_dir) / DIAGNOSTICS_FILE, resume_step) if enabled_writer else None
        self.capturing = False
        self._reset()
        for index, layer in enumerate(self.model.layers):
            layer.register_forward_hook(partial(self._record_rms, index))

    def _reset(self) -> None:
        self.square_sums: dict[int, torch.Tensor] = {}
        self.weight_sums: list[torch.Tensor] = []
        self.micro_batches = 0

    def due(self, step: int) -> bool:
        """`step` is 1-based (the step about to finish)."""
        return self.every > 0 and step % self.every == 0

    @contextmanager
    def capture(self, active: bool):
        """Around one forward. Only forwards are captured: gradient checkpointing reruns layers in backward."""
        self.capturing = active
        try:
            yield
        finally:
            self.capturing = False
        if active:
            self.micro_batches += 1

    def add_weights(self, attn_res_weights) -> None:
        means = [w.detach().float().mean(dim=(0, 1)) for w in attn_res_weights]
        self.weight_sums = means if not self.weight_sums else [a + b for a, b in zip(self.weight_sums, means)]

    def _record_rms(self, index, layer, inputs, outputs) -> None:
        if self.capturing:
            square = outputs[layer.num_new_sources - 1].detach().float().pow(2).mean()
            self.square_sums[index] = self.square_sums.get(index, 0.0) + square

    def record(self, step: int, full_grad, mean) -> None:
        """Called on every process after the step's last backward, before the optimizer step.

        `full_grad(param)` -> its full gradient; `mean(tensor)` -> its mean over processes."""
        n = self.micro_batches
        rms = [float(mean(self.square_sums[i] / n)) ** 0.5 for i in sorted(self.square_sums)]
        weights = [mean(w / n).tolist() for w in self.weight_sums]
        grad_norms = []
        for layer in self.model.layers:
            squares = [g.detach().float().pow(2).sum() for g in map(full_grad, layer.parameters()) if g is not None]
            grad_norms.append(float(torch.stack(squares).sum().sqrt()) if squares else 0.0)
        self._reset()
        if self.log is not None:
            self.log.write(dict(step=step, mode=self.mode, layer_rms=rms, layer_grad_norm=grad_norms, depth_weights=weights))
