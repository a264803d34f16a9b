"""Cross-stage caching of Block AttnRes blocks under an interleaved pipeline schedule: a small simulator.

Setting (Attention Residuals, section 4.1 and Fig. 3): P physical stages (ranks), V virtual stages per rank, so
C = P * V chunks of `layers_per_chunk` decoder layers; chunk c runs on rank c % P in virtual stage c // P, and the
forward pass crosses C - 1 transitions (chunk c - 1 -> chunk c). Blocks: b0 is the token embedding; block k >= 1
covers decoder layers [(k - 1) * S, k * S). At the transition into chunk c (first layer l = c * layers_per_chunk) the
receiver needs every completed block (b0 .. b_{l // S}) plus, when l is inside a block, that block's partial sum.

- Without caching every transition sends the full history: all completed blocks (+ the partial sum).
- With caching (the paper's rule) a rank keeps the completed blocks it held when its earlier chunks started (what it
  received; rank 0 also computes b0 itself), so a transition sends only the completed blocks the receiver lacks.
  Partial sums always travel (they change every layer). `cache_own_blocks=True` also keeps blocks a rank completed
  itself, a further saving the paper's figure does not count.

Counts are in blocks; multiply by batch * seq * hidden * bytes per element for bytes. The backward pass mirrors the
forward (the gradient of each transmitted block travels back), so the same counts apply to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transition:
    chunk: int  # the receiving chunk
    rank: int  # the receiving physical stage
    virtual_stage: int  # 0-based
    completed: tuple[int, ...]  # completed blocks the receiver needs (ids; 0 = embedding)
    partial: int | None  # the block whose running partial sum crosses, or None at a block boundary
    sent_cached: tuple[int, ...]  # completed blocks sent with caching

    @property
    def sent_naive(self) -> tuple[int, ...]:
        return self.completed

    @property
    def saved(self) -> int:
        return len(self.completed) - len(self.sent_cached)


@dataclass
class CachingReport:
    num_stages: int
    virtual_stages: int
    transitions: list[Transition] = field(default_factory=list)

    @property
    def naive_blocks(self) -> int:
        return sum(len(t.sent_naive) for t in self.transitions)

    @property
    def cached_blocks(self) -> int:
        return sum(len(t.sent_cached) for t in self.transitions)

    @property
    def partial_sums(self) -> int:
        """Partial-sum transmissions (the same with and without caching)."""
        return sum(t.partial is not None for t in self.transitions)

    def saved_in_virtual_stage(self, virtual_stage: int) -> int:
        """Redundant block transmissions caching removes on transitions into that virtual stage (0-based)."""
        return sum(t.saved for t in self.transitions if t.virtual_stage == virtual_stage)

    @property
    def peak_naive(self) -> int:
        return max((len(t.sent_naive) for t in self.transitions), default=0)

    @property
    def peak_cached(self) -> int:
        return max((len(t.sent_cached) for t in self.transitions), default=0)

    def table(self) -> str:
        def blocks(ids):
            return "[" + ", ".join(f"b{i}" for i in ids) + "]"

        rows = ["chunk  rank  vstage  needs (naive sends)        cached sends         partial"]
        for t in self.transitions:
            partial = f"b{t.partial}" if t.partial is not None else "-"
            rows.append(f"{t.chunk:>5}  {t.rank:>4}  {t.virtual_stage:>6}  {blocks(t.completed):<25}  "
                        f"+{blocks(t.sent_cached):<18}  {partial}")
        rows.append(f"blocks sent: naive {self.naive_blocks}, cached {self.cached_blocks} "
                    f"(saved {self.naive_blocks - self.cached_blocks}); peak per transition: naive "
                    f"{self.peak_naive}, cached {self.peak_cached}; partial sums {self.partial_sums}")
        return "\n".join(rows)


def _completed_before(layer: int, block_size: int) -> tuple[int, ...]:
    return tuple(range(layer // block_size + 1))  # b0 (embedding) and every block ending at or before `layer`


def simulate_interleaved(num_stages: int, virtual_stages: int, layers_per_chunk: int, block_size: int,
                         cache_own_blocks: bool = False) -> CachingReport:
    """Block transmissions of one micro-batch's forward pass through an interleaved schedule, naive vs cached."""
    for name, value in (("num_stages", num_stages), ("virtual_stages", virtual_stages),
                        ("layers_per_chunk", layers_per_chunk), ("block_size", block_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    report = CachingReport(num_stages, virtual_stages)
    cache: dict[int, set[int]] = {rank: set() for rank in range(num_stages)}
    for chunk in range(num_stages * virtual_stages):
        rank, first_layer = chunk % num_stages, chunk * layers_per_chunk
        needed = _completed_before(first_layer, block_size)
        if chunk > 0:
            partial = first_layer // block_size + 1 if first_layer % block_size else None
            sent = tuple(block for block in needed if block not in cache[rank])
            report.transitions.append(Transition(chunk, rank, chunk // num_stages, needed, partial, sent))
        cache[rank].update(needed)
        if cache_own_blocks:
            cache[rank].update(_completed_before(first_layer + layers_per_chunk, block_size))
    return report
