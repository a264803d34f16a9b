"""A tiny Kimi K3-format folder, written from K3's layout: loading, logits, generation, saving, conversion, errors."""
from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import tests.helpers.k3_reference as k3_reference
from hf_attnres import KimiLinearAttnResConfig, KimiLinearAttnResForCausalLM
from hf_attnres.conversion import ConversionError, convert_checkpoint
from hf_attnres.conversion.kimi_linear.fixtures import random_model
from hf_attnres.conversion.kimi_linear.k3_fixtures import tiny_k3_config, write_k3_checkpoint
from tests.helpers.reference_loop import reference_logits

P = "language_model.model.layers"


@pytest.fixture(scope="module")
def k3(tmp_path_factory):
    """(folder, the model it holds: experts snapped to MXFP4)."""
    model = random_model(tiny_k3_config())
    folder = write_k3_checkpoint(tmp_path_factory.mktemp("k3") / "k3", model, max_shard_size="100KB")
    return folder, model


def load(folder, **kwargs):
    return KimiLinearAttnResForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs).eval()


def stored(folder):
    tensors = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, "pt") as handle:
            tensors.update({name: handle.get_slice(name) for name in handle.keys()})
    return {name: (tuple(view.get_shape()), view.get_dtype()) for name, view in tensors.items()}


def test_folder_has_k3_names_and_shapes(k3):
    folder, model = k3
    c = model.config
    names = stored(folder)
    assert names[f"{P}.1.block_sparse_moe.experts.0.w1.weight_packed"] == ((c.moe_intermediate_size, 32 // 2), "U8")
    assert names[f"{P}.1.block_sparse_moe.experts.0.w1.weight_scale"] == ((c.moe_intermediate_size, 1), "U8")
    assert names[f"{P}.1.block_sparse_moe.experts.3.w2.weight_packed"] == ((32, c.moe_intermediate_size // 2), "U8")
    assert names[f"{P}.1.block_sparse_moe.routed_expert_down_proj.weight"][0] == (32, c.hidden_size)
    assert names[f"{P}.1.block_sparse_moe.routed_expert_norm.weight"][0] == (32,)
    assert names[f"{P}.1.self_attn.g_proj.weight"][0] == (c.num_attention_heads * c.v_head_dim, c.hidden_size)
    assert names[f"{P}.0.self_attn.g_proj.weight"][0] == (c.linear_num_heads * c.linear_head_dim, c.hidden_size)
    assert names[f"{P}.0.self_attn.A_log"][0] == (c.linear_head_dim,)
    assert not any("g_a_proj" in n or n.endswith("experts.0.w1.weight") for n in names)
    assert any(n.startswith("vision_tower.") for n in names) and any(n.startswith("mm_projector.") for n in names)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "kimi_k3" and config["text_config"]["linear_attn_config"]["gate_lower_bound"] == -5.0


def test_from_pretrained_loads_every_k3_piece_exactly(k3, caplog):
    folder, model = k3
    loaded = load(folder)
    assert "vision tower and projector are skipped" in caplog.text
    expected, actual = model.state_dict(), loaded.state_dict()
    assert expected.keys() == actual.keys()
    assert [name for name in expected if not torch.equal(expected[name], actual[name])] == []
    assert {t.dtype for t in actual.values()} == {torch.float32}
    # bf16, the in-memory format K3's experts are meant for, holds every MXFP4 value exactly
    low = KimiLinearAttnResForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).state_dict()
    experts = [name for name in expected if ".experts." in name]
    assert experts and all(low[n].dtype == torch.bfloat16 and torch.equal(low[n].float(), expected[n]) for n in experts)
    layer = loaded.model.layers[1]
    assert type(layer.mlp).__name__ == "LatentMoE" and type(layer.self_attn).__name__ == "GatedMLA"
    assert type(loaded.model.layers[0].self_attn).__name__ == "K3DeltaAttention"
    assert loaded.config.linear_gate_lower_bound == -5.0 and loaded.config.linear_use_full_rank_gate
    assert not hasattr(loaded.config, "quantization_config") and not hasattr(loaded.config, "vision_config")


def test_logits_match_reference_loop_and_generation_uses_the_cache(k3, monkeypatch):
    folder, _ = k3
    model = load(folder)
    ids = torch.randint(3, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits
        # the AttnRes loop of tests/reference_loop.py, every MLP / MoE replaced by its formula (tests/k3_reference.py)
        for layer in model.model.layers:
            mlp = layer.mlp
            formula = k3_reference.latent_moe if hasattr(mlp, "experts") else k3_reference.situ_mlp
            monkeypatch.setattr(mlp, "forward", lambda x, mlp=mlp, formula=formula: formula(x, mlp, model.config))
        expected, _ = reference_logits(model, ids)
        monkeypatch.undo()
        torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
        cached = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=True)
        fresh = model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, fresh)


def test_save_load_round_trip(k3, tmp_path):
    folder, _ = k3
    model = load(folder)
    model.save_pretrained(tmp_path / "saved")
    again = load(tmp_path / "saved")
    a, b = model.state_dict(), again.state_dict()
    assert [name for name in a if not torch.equal(a[name], b[name])] == []
    assert again.config.routed_expert_hidden_size == 32 and again.config.hidden_act == "situ"
    assert again.config.linear_gate_lower_bound == -5.0 and again.config.linear_use_full_rank_gate


def test_convert_checkpoint_dequantizes_and_leaves_vision_behind(k3, tmp_path):
    folder, model = k3
    plan = convert_checkpoint(folder, tmp_path / "hf", verify=True, progress=False)
    assert sorted(plan.reader.skipped) == sorted(n for n in stored(folder) if not n.startswith("language_model."))
    out = stored(tmp_path / "hf")
    assert out["model.layers.1.mlp.experts.gate_up_proj"][1] == "BF16"
    assert not any("vision" in n or "packed" in n for n in out)
    loaded, expected = load(tmp_path / "hf").state_dict(), model.state_dict()
    assert [n for n in expected if not torch.equal(loaded[n], expected[n])] == []
    back = convert_checkpoint(folder, tmp_path / "ms", to="moonshot", verify=True, progress=False)
    assert back.target_config.linear_gate_lower_bound == -5.0
    config = json.loads((tmp_path / "ms" / "config.json").read_text())
    assert config["linear_attn_config"]["use_full_rank_gate"] is True and "linear_gate_lower_bound" not in config


def test_kimi_linear_config_is_not_a_k3_one():
    config = KimiLinearAttnResConfig.from_dict({"num_hidden_layers": 2, "mla_use_nope": True, "some_new_field": 1})
    assert config.hidden_act == "silu" and config.routed_expert_hidden_size is None


# --- malformed variants: each a clear error naming what is wrong ------------------------------------------------

def edit_config(folder, edit):
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


CONFIG_CASES = {
    "unknown text field": (lambda c: c["text_config"].update(mla_new_thing=1), r"text_config\.mla_new_thing: unknown"),
    "unknown wrapper field": (lambda c: c.update(audio_config={}), r"audio_config: unknown Kimi K3 field"),
    "unknown linear field": (lambda c: c["text_config"]["linear_attn_config"].update(gate_upper_bound=1),
                             r"linear_attn_config\.gate_upper_bound: unknown"),
    "router": (lambda c: c["text_config"].update(moe_router_activation_func="softmax"),
               r"moe_router_activation_func='softmax': only \('sigmoid',\)"),
    "rope mla": (lambda c: c["text_config"].update(mla_use_nope=False), r"mla_use_nope=False"),
    "8-bit": (lambda c: c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]
              .update(num_bits=8), r"num_bits=8"),
    "situ beta": (lambda c: c["text_config"].pop("activation_situ_beta"), r"needs activation_situ_beta"),
    "positive bound": (lambda c: c["text_config"]["linear_attn_config"].update(gate_lower_bound=1.0),
                       r"linear_gate_lower_bound must be < 0"),
}


def broken_copy(k3, tmp_path, editor, edit):
    folder = shutil.copytree(k3[0], tmp_path / "bad")
    editor(folder, edit)
    return folder


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_k3_configs_are_named(k3, tmp_path, case):
    edit, message = CONFIG_CASES[case]
    folder = broken_copy(k3, tmp_path, edit_config, edit)
    with pytest.raises(ValueError, match=message):
        KimiLinearAttnResConfig.from_pretrained(folder)
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(folder, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def rewrite(folder, edit):
    tensors = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, "pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
        path.unlink()
    (folder / "model.safetensors.index.json").unlink(missing_ok=True)
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


EXPERT = f"{P}.2.block_sparse_moe.experts.1.w3"
TENSOR_CASES = {
    "missing scale": (lambda t: t.pop(f"{EXPERT}.weight_scale"), r"experts\.1\.w3: MXFP4 weight_scale is missing"),
    "missing packed": (lambda t: t.pop(f"{EXPERT}.weight_packed"), r"experts\.1\.w3: MXFP4 weight_packed is missing"),
    "bad scale shape": (lambda t: t.update({f"{EXPERT}.weight_scale": torch.zeros(32, 2, dtype=torch.uint8)}),
                        r"experts\.1\.w3: weight_packed \[32, 16\] holds \[32, 32\] but weight_scale is \[32, 2\]"),
    "bad packed shape": (lambda t: t.update({f"{EXPERT}.weight_packed": torch.zeros(32, 8, dtype=torch.uint8)}),
                         r"experts\.1\.w3: weight_packed \[32, 8\].*expected \[32, 0\]"),
    "wrong width": (lambda t: t.update({f"{EXPERT}.weight_packed": torch.zeros(32, 32, dtype=torch.uint8),
                                        f"{EXPERT}.weight_scale": torch.zeros(32, 2, dtype=torch.uint8)}),
                    r"experts\.1\.w3\.weight: shape \[32, 64\], expected \[32, 32\]"),
    "short A_log": (lambda t: t.update({f"{P}.0.self_attn.A_log": torch.zeros(1)}),
                    r"self_attn\.A_log: shape \[1\], expected \[head_dim >= 2\]"),
}


@pytest.mark.parametrize("case", sorted(TENSOR_CASES))
def test_bad_k3_tensors_are_named_and_nothing_is_written(k3, tmp_path, case):
    edit, message = TENSOR_CASES[case]
    folder = broken_copy(k3, tmp_path, rewrite, edit)
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(folder, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    if case == "bad scale shape":  # from_pretrained refuses it too (transformers reports the conversion error)
        with pytest.raises(RuntimeError, match=re.escape("conversion")):
            load(folder)
