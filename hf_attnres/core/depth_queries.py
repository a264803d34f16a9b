"""The depth layout's queries only the package's tools ask: the readable names of a mix point's sources (plots,
diagnostics, conversion), a layer's single-source points (pipeline stages), the source counts
(hf_attnres.core.depth_counts) and the number of depth blocks (the two-phase schedule's bank, reports;
`config.attn_res_num_blocks`). Handed to `DepthLayout` and the config classes at the package's import (`install`, from
hf_attnres.core.installed): the model's forward needs none of them, so a saved folder's copy of `DepthLayout` does not
carry them."""
from __future__ import annotations

from hf_attnres.core.config import AttnResConfigChecks
from hf_attnres.core.depth_counts import num_sources, sources_before_layers
from hf_attnres.core.depth_layout import MIX_POINTS, DepthLayout


def mix_point_sources(layout: DepthLayout, layer_idx: int) -> dict[str, int]:
    """The number of sources each mix point of layer `layer_idx` reads."""
    return {point: layout.num_sources(layer_idx, point) for point in MIX_POINTS}


def single_source_points(layout: DepthLayout, layer_idx: int) -> list[str]:
    """Mix points of layer `layer_idx` over one source: the identity (softmax over one score is exactly 1)."""
    if layout.mode == "standard":
        return []
    return [point for point, n in mix_point_sources(layout, layer_idx).items() if n == 1]


def source_names(layout: DepthLayout, layer_idx: int, point: str) -> list[str]:
    """Readable names of the sources the mix `point` of layer `layer_idx` reads, in order (plots, diagnostics):
    block: "emb", "blk0", ..., "partial"; full: "emb", "L0.attn", "L0.mlp", ...; standard: "stream"."""
    n = layout.num_sources(layer_idx, point)
    if layout.mode == "standard":
        return ["stream"]
    if layout.mode == "full":
        names = ["emb"] + [f"L{i}.{part}" for i in range(layout.num_layers) for part in ("attn", "mlp")]
        return names[:n]
    opening = point == "self_attention" and layout.opens_source(layer_idx)
    completed = n - 1 if opening else n - 2  # the sources besides the embedding (and the partial sum)
    names = ["emb"] + [f"blk{b}" for b in range(completed)]
    return names if opening else [*names, "partial"]


def num_blocks(layout: DepthLayout) -> int:
    """Depth blocks: N in the paper (the embedding is one more source). Full mode: one per layer."""
    if layout.mode == "block":
        return -(-layout.num_layers // layout.block_size)
    return layout.num_layers if layout.mode == "full" else 1


def attn_res_num_blocks(config) -> int:
    """Number of depth blocks of a config's layout (`DepthLayout.num_blocks`)."""
    return num_blocks(DepthLayout.of(config))


def install() -> None:
    """The queries as `DepthLayout` methods and properties, and the config's block count (idempotent)."""
    DepthLayout.num_blocks = property(num_blocks)
    DepthLayout.sources_before_layers = sources_before_layers
    DepthLayout.num_sources = num_sources
    AttnResConfigChecks.attn_res_num_blocks = property(attn_res_num_blocks)
    DepthLayout.mix_point_sources = mix_point_sources
    DepthLayout.single_source_points = single_source_points
    DepthLayout.source_names = source_names
