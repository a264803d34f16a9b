"""The depth layout's tool queries (hf_attnres/core/depth_queries.py): handed to `DepthLayout` at the package's import,
they name the sources the model carries, and a saved folder's copy of the layout does not carry them."""
import pytest

from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.families.registry import family_classes
from hf_attnres.folders.remote_code import CORE_FILE, generate


@pytest.mark.parametrize("layout, layer, point, names", [
    (DepthLayout("block", 4, 2), 1, "self_attention", ["emb", "partial"]),
    (DepthLayout("block", 4, 2), 2, "self_attention", ["emb", "blk0"]),  # layer 2 opens block 1: block 0 is complete
    (DepthLayout("block", 4, 2), 2, "mlp", ["emb", "blk0", "partial"]),
    (DepthLayout("block", 4, 2), 4, "output_attn", ["emb", "blk0", "partial"]),
    (DepthLayout("full", 2), 1, "mlp", ["emb", "L0.attn", "L0.mlp", "L1.attn"]),
    (DepthLayout("standard", 2), 1, "mlp", ["stream"]),
])
def test_the_source_names_follow_the_sources_the_model_carries(layout, layer, point, names):
    assert layout.source_names(layer, point) == names
    assert len(names) == (layout.num_sources(layer, point) if layout.mode != "standard" else 1)


def test_a_single_source_point_is_layer_zeros_attention_in_block_and_full_mode():
    assert DepthLayout("block", 4, 2).single_source_points(0) == ["self_attention"]
    assert DepthLayout("full", 2).single_source_points(0) == ["self_attention"]
    assert DepthLayout("block", 4, 2).single_source_points(2) == []
    assert DepthLayout("standard", 2).single_source_points(0) == []


def test_a_folders_depth_layout_carries_no_tool_query():
    core = generate(family_classes("llama")[1].__module__)[f"{CORE_FILE}.py"]
    assert "class DepthLayout" in core
    for query in ("def source_names", "def single_source_points", "def mix_point_sources"):
        assert query not in core, query
