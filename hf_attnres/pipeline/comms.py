"""Bytes sent across each pipeline stage boundary, measured, against the minimum the next stage needs.

Measured: every DeepSpeed pipeline point-to-point send (`deepspeed.runtime.pipe.p2p.send`, the one function the
pipeline engine sends through) is counted while `P2PTraffic` is active: forward sends (to the next stage) carry
activations, backward sends (to the previous stage) their gradients; DeepSpeed's tensor-shape metadata is the int32
buffer it sends before the first activation.

Minimum: the next stage reads every depth source present at the boundary (each later mix point attends over all of
them), so it needs all of them: `DepthLayout.of(config).sources_before_layers()[i]` tensors of [batch, seq, hidden]
for a boundary in front of decoder layer i. Gradients come back for the same tensors. A standard-residual model needs
one.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field

import torch

from ..core.depth_layout import DepthLayout
from .ds import deepspeed

p2p = deepspeed.runtime.pipe.p2p


@dataclass
class BoundaryTraffic:
    boundary: int  # between stage `boundary` and stage `boundary + 1`
    first_decoder_layer_after: int  # the decoder layer the boundary lies in front of (num_hidden_layers: the head)
    tensors: int  # source tensors crossing it
    activation_bytes: int = 0  # forward, summed over micro-batches, data only
    gradient_bytes: int = 0  # backward, summed over micro-batches
    metadata_bytes: int = 0  # DeepSpeed's shape/dtype buffer (int32)
    minimum_bytes: int = 0  # the tensors the next stage needs, per direction, summed over micro-batches
    standard_bytes: int = 0  # what a standard-residual model would send (one hidden state), per direction

    @property
    def overhead(self) -> float:
        """Sent / minimum, both directions, metadata included (1.0 = nothing but what the next stage needs)."""
        sent = self.activation_bytes + self.gradient_bytes + self.metadata_bytes
        return sent / (2 * self.minimum_bytes)


@dataclass
class P2PTraffic:
    """Counts this rank's pipeline sends: {(src_stage, dst_stage, kind): bytes}. Use as a context manager."""

    stage: int
    sent: dict = field(default_factory=dict)

    def _count(self, tensor: torch.Tensor, dest_stage: int) -> None:
        kind = "data" if tensor.is_floating_point() else "metadata"
        key = (self.stage, dest_stage, kind)
        self.sent[key] = self.sent.get(key, 0) + tensor.numel() * tensor.element_size()

    @contextlib.contextmanager
    def counting(self):
        send = p2p.send

        def counted_send(tensor, dest_stage, async_op=False):
            self._count(tensor, dest_stage)
            return send(tensor, dest_stage, async_op=async_op)

        p2p.send = counted_send
        try:
            yield self
        finally:
            p2p.send = send


def boundary_report(
    config, parts: list[int], sent: dict, micro_batches: int, micro_batch_size: int, seq_len: int, dtype: torch.dtype
) -> list[BoundaryTraffic]:
    """Combine every rank's `P2PTraffic.sent` into one row per boundary.

    `parts`: DeepSpeed's partition (`PipelineModule.parts`) over pipe layers [embedding, decoder 0..L-1, head]; the
    boundary after stage s lies in front of pipe layer parts[s + 1], i.e. decoder layer parts[s + 1] - 1.
    """
    counts = DepthLayout.of(config).sources_before_layers()
    one_tensor = micro_batch_size * seq_len * config.hidden_size * torch.empty((), dtype=dtype).element_size()
    rows = []
    for boundary in range(len(parts) - 2):
        decoder_layer = int(parts[boundary + 1]) - 1
        row = BoundaryTraffic(boundary, decoder_layer, counts[decoder_layer])
        row.activation_bytes = sent.get((boundary, boundary + 1, "data"), 0)
        row.metadata_bytes = sent.get((boundary, boundary + 1, "metadata"), 0)
        row.gradient_bytes = sent.get((boundary + 1, boundary, "data"), 0)
        row.minimum_bytes = row.tensors * one_tensor * micro_batches
        row.standard_bytes = one_tensor * micro_batches
        rows.append(row)
    return rows


def report_rows(rows: list[BoundaryTraffic]) -> list[dict]:
    return [{**asdict(row), "overhead": row.overhead} for row in rows]


def format_report(rows: list[BoundaryTraffic]) -> str:
    lines = ["boundary  before-layer  tensors  activations(B)  gradients(B)  metadata(B)  minimum/dir(B)  "
             "standard/dir(B)  sent/minimum"]
    for r in rows:
        lines.append(f"{r.boundary:>8}  {r.first_decoder_layer_after:>12}  {r.tensors:>7}  {r.activation_bytes:>14}  "
                     f"{r.gradient_bytes:>12}  {r.metadata_bytes:>11}  {r.minimum_bytes:>14}  {r.standard_bytes:>15}  "
                     f"{r.overhead:>12.4f}")
    return "\n".join(lines)


__all__ = ["BoundaryTraffic", "P2PTraffic", "boundary_report", "report_rows", "format_report"]
