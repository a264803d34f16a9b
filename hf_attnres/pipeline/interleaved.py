"""Interleaved pipeline parallelism on PyTorch's own engine (`torch.distributed.pipelining`), with the paper's
cross-stage caching of completed depth sources (Attention Residuals, section 4.1, Fig. 3).

Layout: P physical stages (ranks) x V virtual stages: C = P * V chunks of consecutive decoder layers; chunk c runs on
rank c % P (PyTorch's loop-style stage placement), chunk 0 also embeds the tokens and chunk C - 1 ends with the
output mix, final norm and `lm_head`. Between chunks travel the depth sources (`hf_attnres.core.depth_layout`: block
mode:
embedding, completed blocks, partial sum; full mode: every sub-layer output; standard: the residual stream).

Cross-stage caching: a completed source never changes. With `caching=True` a rank keeps (per micro-batch) every
completed source that entered its earlier chunks, so the transition into its later chunk sends only the sources the
receiver lacks plus the running partial sum. How that maps onto the stock schedule (`ScheduleInterleaved1F1B`):

- A `PipelineStage` sends exactly its module's outputs and receives exactly its inputs, one tensor per slot, with
  shapes fixed per stage. Here each chunk's outputs *are* the new tensors only (`ChunkPlan.sends`), so the schedule's
  own P2P carries precisely what the receiver lacks, forward and (as the gradients of those inputs) backward.
- The cached sources live in a per-rank `SourceStore` keyed by (micro-batch, source index). A received tensor is the
  stage's receive buffer: an autograd leaf. A later chunk reading it from the store accumulates its gradient into that
  leaf's `.grad` during its own backward (which the schedule always runs first: chunk c + P's backward feeds chunk
  c + 1's ... and so chunk c's). The stock stage sends `leaf.grad` back when chunk c's backward runs: the gradient of
  a cached block is accumulated locally and sent once. Rank 0's embedding is computed, not received: its store holds a
  detached leaf, and `AddStoredGrad` adds that leaf's accumulated gradient to the embedding's during chunk 0's
  backward.
- Needs a full backward per chunk (`ScheduleInterleaved1F1B`, `ScheduleLoopedBFS`): the zero-bubble schedules split
  input and weight gradients with `autograd.grad`, which would not see the accumulated `.grad` of a cached leaf.

Which sources cross each transition is `plan_chunks` (the depth rule is `DepthLayout`'s); `hf_attnres.pipeline.caching`
simulates the same counts, and `TrafficCounter` records the tensors and bytes the schedule actually sent.
Packed, unpadded causal batches only (as the DeepSpeed stages): masks and positions are rebuilt from the sequence
length, so nothing but depth sources crosses a boundary.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B
from transformers.loss.loss_utils import LOSS_MAPPING

from ..core.depth_layout import DepthLayout
from ..core.mix_point import AttnResMixing
from .layout import LayerContext, logits_step

# --- which sources cross each transition ----------------------------------------------------------------------------

def chunk_layers(num_layers: int, num_chunks: int) -> list[range]:
    """Decoder layers of each chunk: consecutive, as even as possible (earlier chunks take the remainder)."""
    if not 1 <= num_chunks <= num_layers:
        raise ValueError(f"{num_chunks} chunks need 1 <= chunks <= num_hidden_layers={num_layers}")
    base, extra = divmod(num_layers, num_chunks)
    ranges, start = [], 0
    for chunk in range(num_chunks):
        stop = start + base + (chunk < extra)
        ranges.append(range(start, stop))
        start = stop
    return ranges


def completed_sources(layout: DepthLayout, layer_idx: int) -> tuple[int, ...]:
    """Indices of the sources entering layer `layer_idx` that no later layer changes: all of them when the layer opens
    a new source, else all but the running partial sum (the model's `update_sources` rule)."""
    entering = layout.sources_before_layers()[layer_idx]
    return tuple(range(entering if layout.opens_source(layer_idx) else entering - 1))


@dataclass(frozen=True)
class ChunkPlan:
    chunk: int
    rank: int
    virtual_stage: int
    layers: range
    entering: int  # sources entering the chunk's first layer (chunk 0: 1, the embedding it computes)
    received: tuple[int, ...]  # source indices received from the previous chunk, in order (chunk 0: none)
    cached: tuple[int, ...]  # source indices read from this rank's store (kept at its earlier chunks)
    keeps: tuple[int, ...]  # completed source indices this chunk adds to the rank's store
    sends: tuple[int, ...]  # source indices sent to the next chunk (its `received`); the last chunk: none

    @property
    def is_first(self) -> bool:
        return self.chunk == 0

    @property
    def is_last(self) -> bool:
        return not self.sends  # every other chunk sends at least the source its last layer wrote


def plan_chunks(layout: DepthLayout, num_stages: int, virtual_stages: int, caching: bool = True,
                layers: list[range] | None = None) -> list[ChunkPlan]:
    """The transport plan of every chunk. Without caching each transition sends every source (as the DeepSpeed
    pipeline); with it, what the receiving rank did not keep at its earlier chunks."""
    if num_stages < 2 or virtual_stages < 1:
        raise ValueError(f"an interleaved pipeline needs >= 2 stages and >= 1 virtual stage, got {num_stages} x "
                         f"{virtual_stages}")
    num_chunks = num_stages * virtual_stages
    layers = layers or chunk_layers(layout.num_layers, num_chunks)
    if len(layers) != num_chunks:
        raise ValueError(f"{len(layers)} layer ranges for {num_chunks} chunks")
    counts = layout.sources_before_layers()
    held: dict[int, set[int]] = defaultdict(set)  # rank -> completed sources it keeps
    plans = []
    for chunk, chunk_range in enumerate(layers):
        rank, first = chunk % num_stages, chunk_range.start
        entering = counts[first]
        kept = held[rank] if caching else set()
        received = () if chunk == 0 else tuple(i for i in range(entering) if i not in kept)
        keeps = tuple(i for i in completed_sources(layout, first) if i not in kept) if caching else ()
        plans.append(dict(chunk=chunk, rank=rank, virtual_stage=chunk // num_stages, layers=chunk_range,
                          entering=entering, received=received, cached=tuple(sorted(kept)), keeps=keeps))
        kept.update(keeps)
    return [ChunkPlan(**plan, sends=plans[c + 1]["received"] if c + 1 < num_chunks else ())
            for c, plan in enumerate(plans)]


# --- the cache of one rank ------------------------------------------------------------------------------------------

class AddStoredGrad(torch.autograd.Function):
    """Identity on `carrier`; in backward, routes the gradient accumulated on `leaf` (the store's detached copy of
    `source`, read by later chunks) into `source`'s graph. Runs in the owning chunk's backward, after every later chunk
    of the micro-batch has run its own."""

    @staticmethod
    def forward(ctx, carrier, source, leaf):
        ctx.leaf = leaf
        return carrier.view_as(carrier)

    @staticmethod
    def backward(ctx, grad):
        stored = ctx.leaf.grad
        ctx.leaf = None
        return grad, stored, None


class SourceStore:
    """The completed depth sources a rank keeps, per micro-batch, for its later chunks. `microbatch` is set by the
    stage before each forward (`CachingStage.forward_one_chunk`)."""

    def __init__(self):
        self.tensors: dict[tuple[int, int], torch.Tensor] = {}
        self.microbatch = None

    def put(self, index: int, tensor: torch.Tensor) -> torch.Tensor | None:
        """Keep `tensor` as source `index` of the current micro-batch. A received tensor (a leaf) is kept as it is;
        a computed one as a detached leaf, returned so its owner routes the leaf's gradient back (`AddStoredGrad`)."""
        if tensor.is_leaf or not tensor.requires_grad:
            self.tensors[self.microbatch, index] = tensor
            return None
        leaf = tensor.detach().requires_grad_()
        self.tensors[self.microbatch, index] = leaf
        return leaf

    def get(self, index: int) -> torch.Tensor:
        return self.tensors[self.microbatch, index]

    def clear(self) -> None:
        self.tensors.clear()


# --- a chunk: decoder layers on the depth sources -------------------------------------------------------------------

class InterleavedChunk(AttnResMixing, nn.Module):
    """The model's own modules for one chunk: [embedding,] its decoder layers [, output mix, final norm, lm_head].
    Parameter names are the full model's minus its `model.` prefix (`model_name` adds it back). What the layers read
    beside the sources (mask, positions, rotary embeddings) and the family's last step on the logits are the model's
    own (`hf_attnres.pipeline.layout`), for a model of any family."""

    def __init__(self, model, plan: ChunkPlan, store: SourceStore):
        super().__init__()
        self.config, self.plan, self.store = model.config, plan, store
        base = model.model
        if plan.is_first:
            self.embed_tokens = base.embed_tokens
        self.layers = nn.ModuleDict({str(i): base.layers[i] for i in plan.layers})
        self.layer_context = LayerContext(base)
        self.is_last = plan.is_last
        self.tied = bool(getattr(self.config, "tie_word_embeddings", False))
        if self.is_last:
            if self.tied:  # lm_head is the embedding matrix: this rank's copy of it (`InterleavedPipeline.step` syncs)
                self.embed_tokens = base.embed_tokens
            else:
                self.lm_head = model.lm_head
            self.fusable_norm = base.fusable_norm  # the model's norm policy: its final norm fuses as there
            self.postprocess_logits = logits_step(model)
            # every base-model module but the embedding and the layers: the final norm and the output mix point's
            # modules, under the names `AttnResMixing.mix` reads
            for name, module in base.named_children():
                if module is not base.embed_tokens and module is not base.layers:
                    self.add_module(name, module)

    @staticmethod
    def model_name(local_name: str) -> str:
        return local_name if local_name.startswith("lm_head.") else f"model.{local_name}"

    def sources_in(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if self.plan.is_first:
            return (self.embed_tokens(inputs[0]),)
        received = dict(zip(self.plan.received, inputs, strict=True))
        return tuple(received[i] if i in received else self.store.get(i) for i in range(self.plan.entering))

    def forward(self, *inputs: torch.Tensor):
        sources = self.sources_in(inputs)
        owned = [(sources[i], leaf) for i in self.plan.keeps if (leaf := self.store.put(i, sources[i])) is not None]
        context = self.layer_context(sources[0])  # one mask (and rotary embedding) per attention type
        for i in self.plan.layers:
            layer = self.layers[str(i)]
            outputs = layer(*sources, **context(i))
            sources = layer.update_sources(sources, outputs[: layer.num_new_sources])
        if self.is_last:
            hidden = self.mix("output_attn", sources, None, self.norm)
            logits = nn.functional.linear(hidden, self.embed_tokens.weight) if self.tied else self.lm_head(hidden)
            outputs = (self.postprocess_logits(logits),)
        else:
            outputs = tuple(sources[i] for i in self.plan.sends)
        for source, leaf in owned:
            outputs = (AddStoredGrad.apply(outputs[0], source, leaf), *outputs[1:])
        return outputs if len(outputs) > 1 else outputs[0]


# --- stages, traffic, schedule --------------------------------------------------------------------------------------

class TrafficCounter:
    """Tensors and bytes the schedule's P2P sends carried, per (direction, transition); transition t joins chunk t - 1
    and chunk t (forward: chunk t - 1 sends; backward: chunk t sends its input gradients)."""

    def __init__(self):
        self.tensors: dict[tuple[str, int], int] = defaultdict(int)
        self.bytes: dict[tuple[str, int], int] = defaultdict(int)
        self.sends: dict[tuple[str, int], int] = defaultdict(int)  # send calls: one per micro-batch

    def record(self, direction: str, transition: int, ops) -> None:
        key = (direction, transition)
        self.sends[key] += 1
        self.tensors[key] += len(ops)
        self.bytes[key] += sum(op.tensor.numel() * op.tensor.element_size() for op in ops)

    def per_microbatch(self) -> dict[str, dict]:
        """{"forward/3": {"tensors": n, "bytes": b}, ...} per micro-batch (totals over the sends divided by them)."""
        return {f"{d}/{t}": {"tensors": self.tensors[d, t] // n, "bytes": self.bytes[d, t] // n}
                for (d, t), n in sorted(self.sends.items(), key=lambda kv: (kv[0][0], kv[0][1]))}


class CachingStage(PipelineStage):
    """A stock `PipelineStage` that tells its chunk which micro-batch runs (for the rank's store) and counts what it
    sends."""

    def __init__(self, chunk: InterleavedChunk, num_chunks: int, example_inputs, example_outputs, traffic, group=None):
        super().__init__(chunk, chunk.plan.chunk, num_chunks, torch.device("cpu") if not torch.cuda.is_available()
                         else torch.device("cuda", torch.cuda.current_device()),
                         input_args=example_inputs, output_args=example_outputs, group=group)
        self.chunk, self.traffic = chunk, traffic

    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None, save_forward_output=True):
        self.chunk.store.microbatch = fwd_chunk_id
        return super().forward_one_chunk(fwd_chunk_id, args, kwargs, save_forward_output)

    def clear_runtime_states(self) -> None:  # the schedule calls it at the start of every step
        super().clear_runtime_states()
        self.chunk.store.clear()

    def get_fwd_send_ops(self, fwd_chunk_id):
        ops = super().get_fwd_send_ops(fwd_chunk_id)
        if ops:
            self.traffic.record("forward", self.stage_index + 1, ops)
        return ops

    def get_bwd_send_ops(self, bwd_chunk_id):
        ops = super().get_bwd_send_ops(bwd_chunk_id)
        if ops:
            self.traffic.record("backward", self.stage_index, ops)
        return ops


def boundary_examples(plan: ChunkPlan, config, micro_batch_size: int, seq_len: int, dtype):
    """Meta tensors of a chunk's inputs and outputs: the stage's static shapes (no shape inference run, which would
    call the chunk outside a micro-batch)."""
    def sources(n):
        return tuple(torch.empty(micro_batch_size, seq_len, config.hidden_size, dtype=dtype, device="meta",
                                 requires_grad=True) for _ in range(n))

    inputs = (torch.empty(micro_batch_size, seq_len, dtype=torch.long, device="meta"),) if plan.is_first \
        else sources(len(plan.received))
    outputs = sources(len(plan.sends)) if plan.sends else (
        torch.empty(micro_batch_size, seq_len, config.vocab_size, dtype=dtype, device="meta", requires_grad=True),)
    return inputs, outputs


class CausalLMLoss:
    """The model's own loss (`ForCausalLM`: shift, mean over non-ignored tokens) on the last chunk's logits."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return LOSS_MAPPING["ForCausalLM"](logits=logits, labels=labels, vocab_size=self.vocab_size)


@dataclass
class InterleavedPipeline:
    """This rank's share: its chunks (stages), the schedule over them, and the counters."""

    stages: list[CachingStage]
    schedule: ScheduleInterleaved1F1B
    plans: list[ChunkPlan]
    traffic: TrafficCounter
    rank: int
    num_stages: int
    tied_shape: tuple[int, int] | None = None  # the tied embedding matrix's shape; None: untied
    group: object = None  # the process group of the stages (None: the default one)

    @property
    def chunks(self) -> list[InterleavedChunk]:
        return [stage.chunk for stage in self.stages]

    @property
    def has_first(self) -> bool:
        return self.rank == 0

    @property
    def has_last(self) -> bool:
        return self.plans[-1].rank == self.rank

    def parameters(self):
        return [p for chunk in self.chunks for p in chunk.parameters()]

    def tied_copy(self) -> nn.Parameter | None:
        """This rank's copy of a tied embedding matrix: rank 0's (the input embedding) and the last chunk's rank's
        (its `lm_head`), kept equal by summing their gradients (`step`)."""
        if self.tied_shape is None:
            return None
        return next((chunk.embed_tokens.weight for chunk in self.chunks if hasattr(chunk, "embed_tokens")), None)

    def norm_parameters(self) -> list[nn.Parameter]:
        """The parameters this rank counts in the global gradient norm: a tied matrix's copy only on rank 0."""
        copy = self.tied_copy() if self.rank != 0 else None
        return [p for p in self.parameters() if p is not copy]

    def named_parameters(self) -> dict[str, nn.Parameter]:
        """This rank's parameters under the full model's names."""
        return {chunk.model_name(name): p for chunk in self.chunks for name, p in chunk.named_parameters()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {chunk.model_name(name): t for chunk in self.chunks for name, t in chunk.state_dict().items()}

    def step(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
        """Forward and backward of one batch (split into the schedule's micro-batches); the mean micro-batch loss on
        the rank holding the last chunk, else None. Gradients: the mean over micro-batches (as one process)."""
        losses = []
        self.schedule.step(*((input_ids,) if self.has_first else ()), target=labels if self.has_last else None,
                           losses=losses)
        self.sum_tied_gradients()
        return torch.stack([loss.detach() for loss in losses]).mean() if self.has_last else None

    def sum_tied_gradients(self) -> None:
        """A tied embedding matrix's gradient is the sum of its two copies' (input embedding and `lm_head`), as in one
        process: summed over the ranks (zeros from those without a copy), so both copies make the same update."""
        if self.tied_shape is None:
            return
        copy = self.tied_copy()
        reference = next(iter(self.parameters()))
        grad = copy.grad if copy is not None and copy.grad is not None else torch.zeros(
            self.tied_shape, dtype=reference.dtype, device=reference.device)
        torch.distributed.all_reduce(grad, group=self.group)
        if copy is not None:
            copy.grad = grad


def build_interleaved(model, rank: int, num_stages: int, virtual_stages: int, n_microbatches: int,
                      micro_batch_size: int, seq_len: int, caching: bool = True, layers: list[range] | None = None,
                      group=None) -> InterleavedPipeline:
    """This rank's chunks of `model` (an AttnRes causal LM of any family, the same on every rank) and the interleaved
    1F1B schedule over them. The chunks hold the model's own modules; the rest of the model can be dropped."""
    plans = plan_chunks(DepthLayout.of(model.config), num_stages, virtual_stages, caching, layers)
    store, traffic = SourceStore(), TrafficCounter()
    dtype = model.model.embed_tokens.weight.dtype
    stages = []
    for plan in plans[rank::num_stages]:
        chunk = InterleavedChunk(model, plan, store)
        inputs, outputs = boundary_examples(plan, model.config, micro_batch_size, seq_len, dtype)
        stages.append(CachingStage(chunk, len(plans), inputs, outputs, traffic, group))
    schedule = ScheduleInterleaved1F1B(stages, n_microbatches, loss_fn=CausalLMLoss(model.config.vocab_size))
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    tied_shape = tuple(model.get_input_embeddings().weight.shape) if tied else None
    return InterleavedPipeline(stages, schedule, plans, traffic, rank, num_stages, tied_shape, group)


def expected_traffic(plans: list[ChunkPlan], micro_batch_size: int, seq_len: int, hidden: int,
                     bytes_per_element: int) -> dict[str, dict]:
    """What `TrafficCounter.per_microbatch` must read: every transition carries its receiver's `received` tensors,
    forward and (their gradients) backward."""
    size = micro_batch_size * seq_len * hidden * bytes_per_element
    rows = {}
    for plan in plans[1:]:
        for direction in ("backward", "forward"):
            rows[f"{direction}/{plan.chunk}"] = {"tensors": len(plan.received), "bytes": len(plan.received) * size}
    return dict(sorted(rows.items(), key=lambda kv: (kv[0].split("/")[0], int(kv[0].split("/")[1]))))


__all__ = [
    "AddStoredGrad",
    "CachingStage",
    "CausalLMLoss",
    "ChunkPlan",
    "InterleavedChunk",
    "InterleavedPipeline",
    "SourceStore",
    "TrafficCounter",
    "build_interleaved",
    "chunk_layers",
    "completed_sources",
    "expected_traffic",
    "plan_chunks",
]
