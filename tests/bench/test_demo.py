"""`attnres demo`: each mix point's sources under their own names (a point's running partial sum was
printed as `blk0` / `blk1`, the output mix's names), in the printout and the plot."""


import pytest

from hf_attnres.bench.args import DemoArgs
from hf_attnres.bench.demo import demo, point_source_names
from hf_attnres.utils.tiny import tiny_config


def test_each_point_names_its_own_sources():
    names = point_source_names(tiny_config("block", block_size=2, num_layers=4, family="kimi_linear"))
    assert names[:4] == [["emb"], ["emb", "partial"], ["emb", "partial"], ["emb", "partial"]]  # block 0
    assert names[4] == ["emb", "blk0"]  # layer 2 attention opens block 1: block 0 is complete, no partial yet
    assert names[-1] == ["emb", "blk0", "partial"]  # the output mix: the last block is still a partial sum
    full = point_source_names(tiny_config("full", num_layers=2, family="kimi_linear"))
    assert full[-1] == ["emb", "L0.attn", "L0.mlp", "L1.attn", "L1.mlp"] and len(full) == 5


@pytest.mark.slow  # trains the demo model: ~30-60 s on 2 CPU cores
@pytest.mark.parametrize("mode", ["block", "full"])
def test_demo_prints_and_plots_the_points_own_names(tmp_path, capsys, mode):
    plot = tmp_path / "weights.png"
    demo(DemoArgs(mode=mode, block_size=2, layers=4, steps=1, new_tokens=2, plot=str(plot), seed=0))
    lines = {line.split(":")[0].strip(): line for line in capsys.readouterr().out.splitlines() if ": " in line}
    if mode == "block":
        assert "emb=" in lines["layer 0 mlp"] and "partial=" in lines["layer 0 mlp"]
        assert "blk" not in lines["layer 0 mlp"] and "blk0=" in lines["output"]
    else:
        assert "L0.attn=" in lines["layer 0 mlp"] and "L1.mlp=" in lines["output"]
    assert plot.is_file() and plot.stat().st_size > 0


@pytest.mark.parametrize("family", [None, "qwen3"])
def test_demo_builds_the_family_asked_for_and_llama_when_none_is(capsys, family):
    args = DemoArgs(mode="block", block_size=1, layers=2, steps=0, new_tokens=1, plot=None, seed=0)
    if family is not None:
        args.family = family
    demo(args)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{family or 'llama'} block AttnRes, 2 layers"), first
