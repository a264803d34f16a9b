"""The depth layout of an AttnRes model of any family: which depth sources exist at each mix point. The one home of
that rule: the model, the two-phase schedule, pipeline stages, the memory planner, diagnostics, the ablations and the
demo all ask it, so it is spelled once (the tools' own queries: hf_attnres.core.depth_queries).
"""
from dataclasses import dataclass

MIX_POINTS = ("self_attention", "mlp")
OUTPUT_POINT = "output_attn"


@dataclass(frozen=True)
class DepthLayout:
    """Which depth sources exist where: pure arithmetic on three numbers of the config. Sources, in order, as the model
    carries them (`AttnResModelMixin.run_depth`):

    - standard: one source, the residual stream (PreNorm).
    - block: the embedding, one sum per completed block of `block_size` layers, then the running partial sum of the
      current block. A block's first attention output *opens* a new partial sum (the previous partial sum, or at
      layer 0 the embedding, stays as a source); every other sub-layer output joins the partial sum.
    - full: the embedding and every sub-layer output, each its own source.

    Mix points: before each layer's attention ("self_attention") and MLP ("mlp"), and before the final norm
    ("output_attn", index = num_layers)."""

    mode: str  # "standard", "block" or "full"
    num_layers: int
    block_size: int = 0  # layers per block (block mode)

    @classmethod
    def of(cls, config) -> "DepthLayout":
        """The layout of an AttnRes config (anything with its three fields)."""
        return cls(config.attn_res_mode, config.num_hidden_layers, config.attn_res_block_size)

    # --- layers -----------------------------------------------------------------------------------------------------
    def opens_source(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx`'s attention output opens a new source (else it joins the last source's sum)."""
        return self.mode == "full" or (self.mode == "block" and layer_idx % self.block_size == 0)

    @property
    def new_sources_per_layer(self) -> int:
        """Sources a layer returns: 2 in full mode (attention and MLP outputs), else 1 (the updated partial sum)."""
        return 2 if self.mode == "full" else 1

    def update_sources(self, layer_idx: int, sources: tuple, new_sources: tuple) -> tuple:
        """The sources after layer `layer_idx`: its outputs open new sources, or replace the running partial sum."""
        return (*(sources if self.opens_source(layer_idx) else sources[:-1]), *new_sources)


__all__ = ["DepthLayout", "MIX_POINTS", "OUTPUT_POINT"]
