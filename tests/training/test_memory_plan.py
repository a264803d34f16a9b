"""hf_attnres.training.memory_plan and `attnres plan-memory` (hf_attnres.cli.plan_memory):
arithmetic by hand on a tiny config,
against real models, the CLI, and a base install (no extras) running it."""
from __future__ import annotations

import json

import pytest
import torch

from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.cli import plan_memory as cli
from hf_attnres.conversion.kimi_linear.k3_fixtures import tiny_k3_config
from hf_attnres.training.memory_plan import (
    count_parameters,
    depth_bank_bytes,
    pipeline_boundaries,
    plan_counts,
    weight_bytes,
)
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, attn_res_config, attn_res_model, source_config
from tests.helpers.base_install import ABSENT, run_on_base_install


def test_tiny_k3_by_hand():
    """2 layers, hidden 64: layer 0 KDA (2 heads x 16) + dense MLP (128), layer 1 MLA (4 heads) + latent MoE."""
    config = tiny_k3_config(num_layers=2)
    kda = (3 * 64 * 32 + 3 * 32 * 4 + 64 * 16 + 16 * 32 + 32 + 2 + 64 * 2
           + 64 * 32 + 16 + 32 * 64)  # ... g_proj, o_norm, o_proj
    # q, kv_a, norm, kv_b, o, gate
    mla = 64 * 4 * 16 + 64 * (16 + 8) + 16 + 16 * 4 * (8 + 16) + 4 * 16 * 64 + 64 * 4 * 16
    routed = 4 * 3 * 32 * 32  # 4 experts at latent width 32, intermediate 32
    moe_other = 4 * 64 + 3 * 64 * (2 * 32) + 64 * 32 + 32 * 64 + 32  # router, 2 shared experts, down, up, latent norm
    per_layer_norms, mixes = 2 * 64, 2 * (64 + 64)
    counts = count_parameters(config)
    assert (counts.attention, counts.routed_experts, counts.moe_other, counts.dense_mlp) == (
        kda + mla, routed, moe_other, 3 * 64 * 128)
    total = kda + mla + routed + moe_other + 3 * 64 * 128 + 2 * per_layer_norms + 2 * mixes + 2 * 256 * 64 + 64 + 128
    assert counts.total == total == 114978
    assert weight_bytes(counts) == {"fp32": 4 * total, "bf16": 2 * total,
                                    "bf16 + MXFP4 routed experts": 2 * (total - routed) + routed * (4 + 0.25) / 8}
    # block size 2: the embedding and the running partial sum reach the output mix
    assert depth_bank_bytes(config, batch=3, tokens=5) == 2 * 3 * 5 * 64 * 2
    assert pipeline_boundaries(config, stages=2, micro_batch=1, seq_len=5, dtype_bytes=4) == [(1, 2, 2 * 5 * 64 * 4)]


@pytest.mark.parametrize("config", [
    tiny_k3_config(), tiny_config("block", 2, family="kimi_linear"), tiny_config("full", family="kimi_linear"),
    tiny_config("standard", family="kimi_linear"),
    tiny_k3_config(linear_use_full_rank_gate=False, latent_moe_use_norm=False, q_lora_rank=8, attention_bias=True,
                   mla_use_output_gate=False, linear_gate_lower_bound=None),
], ids=["k3", "block", "full", "standard", "k3-variant"])
def test_counts_match_instantiated_models(config):
    with torch.device("meta"):
        model = KimiLinearAttnResForCausalLM(config)
    assert count_parameters(config).total == sum(p.numel() for p in model.parameters())
    layer_sizes = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    assert count_parameters(config).per_layer == layer_sizes


def test_k3_preset_reads_through_the_strict_k3_reader():
    from hf_attnres.conversion.kimi_linear.config import parse_config
    from hf_attnres.conversion.kimi_linear.k3_preset import k3_config_dict

    config = parse_config(k3_config_dict())
    assert config.layer_types.count("full_attention") == 24 and config.layer_types[-1] == "full_attention"
    assert config.mlp_layer_types[0] == "dense" and config.mlp_layer_types.count("sparse") == 92
    assert config.attn_res_num_blocks == 8 and config.linear_gate_lower_bound == -5.0
    counts = count_parameters(config)
    # per routed expert: 3 x 3584 x 3072 weights; 896 of them in each of 92 MoE layers
    assert counts.routed_experts == 92 * 896 * 3 * 3584 * 3072


def test_script_prints_every_section(capsys):
    assert cli.main([]) == 0 and "Kimi K3 (published config): 93 layers" in capsys.readouterr().out  # defaults
    assert cli.main(["tiny-k3", "--batch", "2", "--context", "16", "--stages", "2"]) == 0
    out = capsys.readouterr().out
    total = count_parameters(tiny_k3_config()).total
    assert f"{total:,}" in out and "bf16 + MXFP4 routed experts" in out
    assert "AttnRes depth bank, batch 2 x 16 tokens" in out and "pipeline boundaries, 2 stages" in out


def test_script_reads_a_config_file_and_folder(tmp_path, capsys):
    from hf_attnres.conversion.kimi_linear.k3_fixtures import k3_config_dict

    (tmp_path / "config.json").write_text(json.dumps(k3_config_dict(tiny_k3_config())))
    assert cli.main([str(tmp_path)]) == 0 and cli.main([str(tmp_path / "config.json")]) == 0
    assert f"{count_parameters(tiny_k3_config()).total:,}" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    (None, "neither a config.json"),
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"model_type": "kimi_k3", "text_config": {"num_hidden_layers": 2, "hidden_act": "situ",
                                                           "activation_situ_beta": 4.0, "mystery": 1}}),
     r"text_config\.mystery: unknown Kimi K3 field"),
])
def test_script_bad_inputs_are_one_line_errors(tmp_path, capsys, content, message):
    import re

    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    assert cli.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err) and "Traceback" not in err


def test_script_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0 and "MXFP4" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tiny", "--batch", "0"])
    assert exit_info.value.code == 2 and "--batch must be >= 1" in capsys.readouterr().err


def test_runs_on_a_base_install():
    """Only torch, transformers and the base dependencies: no DeepSpeed, datasets or lm-eval anywhere on the way."""
    result = run_on_base_install(f"""
        import importlib.util, json, sys
        assert all(importlib.util.find_spec(name) is None for name in {ABSENT!r})  # the extras really are hidden
        from hf_attnres.cli.plan_memory import main
        code = main(["tiny-k3", "--stages", "2"])
        print(json.dumps([code, sorted(name for name in sys.modules if name.split(".")[0] in {ABSENT!r})]))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    *out, last = result.stdout.strip().splitlines()
    assert json.loads(last) == [0, []]
    assert f"{count_parameters(tiny_k3_config()).total:,}" in "\n".join(out) and "pipeline boundaries" in "\n".join(out)


@pytest.mark.parametrize("n, text", [(0, "0 bytes"), (1023, "1,023 bytes"), (2048, "2.00 KiB"),
                                     (3 * 2**20, "3.00 MiB"), (5177 * 2**30, "5,177.00 GiB")])
def test_sizes_read_in_sensible_units(n, text):
    """A tiny model printed "0.00 GiB" everywhere; GiB stays the largest unit (the README's K3 tables)."""
    from hf_attnres.training.memory_plan import size_text

    assert size_text(n) == text


def test_tiny_model_sizes_are_not_zero_and_no_optimizer_is_promised(capsys):
    from hf_attnres.cli import COMMANDS

    assert cli.main(["tiny", "--context", "64", "--stages", "2"]) == 0
    out = capsys.readouterr().out
    assert "0.00 GiB" not in out and " KiB" in out and "no optimizer state" in out
    assert "optimizer," not in COMMANDS["plan-memory"][1] and "no optimizer state" in cli.build_parser().description


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["block", "full"])
def test_every_family_counts_its_model_and_plans_from_its_folder(family, mode, tmp_path, capsys):
    """An AttnRes config.json of each family, and the family's own (standard): counts as built, depth bank by mode."""
    config = attn_res_config(family, mode)
    model = attn_res_model(family, mode)
    counts = plan_counts(config)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert counts.per_layer == [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    assert counts.attn_res == (2 * 4 + 1) * 2 * 32  # a pseudo-query and a key-norm gain per mix point
    assert counts.lm_head == (0 if config.tie_word_embeddings else 96 * 32)
    config.save_pretrained(tmp_path / "attnres")
    source_config(family).save_pretrained(tmp_path / "own")
    assert cli.main([str(tmp_path / "attnres"), "--context", "16", "--stages", "2"]) == 0
    assert cli.main([str(tmp_path / "own"), "--context", "16"]) == 0
    out = capsys.readouterr().out
    assert f"attn_res_mode={mode}" in out and f"{counts.total:,}" in out and "MXFP4" not in out
    sources = 3 if mode == "block" else 9  # embedding, one block, the partial sum / every sub-layer output
    assert f"bf16: {sources} sources of [batch, tokens, hidden] = {sources * 16 * 32 * 2 // 1024}.00 KiB" in out
    assert "attn_res_mode=standard" in out and "bf16: 1 sources" in out  # the family's own config.json


def test_default_context_stays_within_the_models_positions(tmp_path, capsys):
    """No --context: 32,768 tokens, or the model's max_position_embeddings when smaller, with a note; an explicit
    --context is used as given, with a note when it is beyond the model's positions."""
    config = source_config("llama")
    config.max_position_embeddings = 8192
    config.save_pretrained(tmp_path / "short")
    assert cli.main([str(tmp_path / "short"), "--stages", "2"]) == 0
    captured = capsys.readouterr()
    assert "note: --context 8,192: the model's max_position_embeddings" in captured.err
    assert cli.default_context(str(tmp_path / "short"))[0] == 8192
    assert cli.main([str(tmp_path / "short"), "--stages", "2", "--context", "65536"]) == 0
    captured = capsys.readouterr()
    assert "note: --context 65,536 is beyond the model's max_position_embeddings 8,192" in captured.err
    assert "batch 1 x 65536 tokens" in captured.out  # planned as given
    assert cli.main([str(tmp_path / "short"), "--stages", "2", "--context", "8192"]) == 0
    assert "note:" not in capsys.readouterr().err
    config.max_position_embeddings = 131072
    config.save_pretrained(tmp_path / "long")
    assert cli.default_context(str(tmp_path / "long")) == (32768, None)
    assert cli.default_context("tiny") == (32768, None)


@pytest.mark.parametrize("family", [*FAMILIES, "kimi_linear"])
def test_every_familys_tiny_preset_plans_in_that_family(family, capsys):
    from hf_attnres.families.registry import family_of_model_type
    from hf_attnres.training.memory_plan import PLAN_PRESETS, load_plan_config

    config, name = load_plan_config(f"tiny-{family}")
    assert family_of_model_type(config.model_type) == family == PLAN_PRESETS[f"tiny-{family}"].family
    assert plan_counts(config).total > 0
    assert cli.main([f"tiny-{family}", "--context", "64", "--stages", "2"]) == 0 and name in capsys.readouterr().out
    assert family_of_model_type(load_plan_config("tiny")[0].model_type) != "kimi_linear"  # no family named: Llama
