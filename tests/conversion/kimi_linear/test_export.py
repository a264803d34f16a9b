"""`attnres export`: the Kimi K3 / Kimi Linear layouts the serving runtimes read, refusals by name before anything is
written, a K3 folder fine-tuned here written back as K3, and the Auto classes resolving `kimi_k3`."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

import hf_attnres  # noqa: F401  registers the Auto classes (kimi_k3 included)
from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.cli.export import main as export
from hf_attnres.conversion.kimi_linear.export import export_checkpoint
from hf_attnres.conversion.kimi_linear.k3_fixtures import tiny_k3_config, write_k3_checkpoint
from hf_attnres.conversion.kimi_linear.runtimes import ExportRefused, check_representable
from hf_attnres.utils.tiny import K3_SMALL_PRESET
from tests.helpers.toolchain_fixtures import tiny_tokenizer


def k3_folder(path, **overrides):
    """A tiny K3-format checkpoint (MXFP4 experts, vision tower) of a random model, with a tokenizer."""
    tokenizer = tiny_tokenizer()
    fields = dict(linear_num_heads=4, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)  # KDA heads = MLA heads
    config = tiny_k3_config(**{**fields, **overrides})
    model = KimiLinearAttnResForCausalLM(config)
    with torch.no_grad():  # pseudo-queries off zero: a uniform depth mix hides wiring bugs
        for name, param in model.named_parameters():
            if name.endswith("_res_proj.weight"):
                param.normal_(0, 0.5)
    write_k3_checkpoint(path, model)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return k3_folder(tmp_path_factory.mktemp("export") / "k3")


def stored_names(folder):
    names = {}
    for file in folder.glob("*.safetensors"):
        with safe_open(file, framework="pt") as handle:
            names.update({name: handle.get_slice(name).get_shape() for name in handle.keys()})
    return names


def logits(model, ids):
    with torch.no_grad():
        return model.eval()(input_ids=ids, use_cache=False).logits


def test_k3_export_is_the_k3_layout_and_loads_back_bit_identical(source, tmp_path):
    result = export([str(source), str(tmp_path / "out"), "--to", "k3", "--verify", "--no-progress"])
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["KimiK3ForConditionalGeneration"] and config["model_type"] == "kimi_k3"
    text = config["text_config"]
    # K3's field names, what llama.cpp's converter reads and asserts
    assert text["hidden_act"] == "situ" and text["mla_use_nope"] is True
    assert text["moe_router_activation_func"] == "sigmoid" and text["attn_res_block_size"] == 2
    assert text["num_experts"] == 4 and text["max_position_embeddings"] == 1048576
    assert text["linear_attn_config"]["kda_layers"] == [1] and text["linear_attn_config"]["use_full_rank_gate"]
    assert not {"attn_res_mode", "attn_res_backend", "num_local_experts", "model_max_length", "layer_types",
                "quantization_config"} & set(text)
    names = stored_names(out)
    assert all(name.startswith("language_model.model.") or name == "language_model.lm_head.weight" for name in names)
    assert names["language_model.model.layers.0.self_attn.A_log"] == [16]  # K3's [head_dim] (4 heads used)
    assert "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight" in names  # Moonshot's names, bf16
    assert not any("vision_tower" in name or name.endswith("weight_packed") for name in names)
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(result["side_files"])
    assert (out / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    ids = torch.randint(0, 300, (2, 9))
    expected = logits(KimiLinearAttnResForCausalLM.from_pretrained(source), ids)
    assert torch.equal(logits(KimiLinearAttnResForCausalLM.from_pretrained(out), ids), expected)


def test_kimi_linear_export_carries_attn_res_block_size(source, tmp_path):
    out = tmp_path / "kl"
    export_checkpoint(source, out, to="kimi-linear", dtype="bfloat16", verify=True, progress=False)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["KimiLinearForCausalLM"] and config["model_type"] == "kimi_linear"
    assert config["attn_res_block_size"] == 2 and config["dtype"] == "bfloat16" and "text_config" not in config
    names = stored_names(out)
    assert names["model.layers.0.self_attn.A_log"] == [1, 1, 4, 1]  # Kimi Linear's own shape
    loaded = KimiLinearAttnResForCausalLM.from_pretrained(out)
    assert loaded.dtype == torch.bfloat16
    expected = KimiLinearAttnResForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    ids = torch.randint(0, 300, (1, 7))
    assert torch.equal(logits(loaded, ids), logits(expected, ids))


# (config overrides, target, field named, runtime named); `built` cases cannot even be saved as a folder (the config
# refuses them), so they are checked on a config object
REFUSALS = [
    (dict(attn_res_mode="full", attn_res_block_size=0), "k3", "attn_res_mode='full'", "vLLM, SGLang, llama.cpp"),
    (dict(attn_res_mode="full", attn_res_block_size=0), "kimi-linear", "attn_res_mode='full'", "vLLM"),
    (dict(attn_res_mode="standard", attn_res_block_size=0), "k3", "attn_res_mode='standard'", "vLLM, SGLang"),
    (dict(attn_res_static_mixing=True), "k3", "attn_res_static_mixing=True", "llama.cpp"),
    (dict(attn_res_score="sigmoid"), "kimi-linear", "attn_res_score='sigmoid'", "vLLM"),
    (dict(attn_res_key_norm=False), "k3", "attn_res_key_norm=False", "llama.cpp"),
    (dict(hidden_act="silu"), "k3", "hidden_act='silu'", "llama.cpp, SGLang"),
    (dict(num_expert_group=2, topk_group=1), "k3", "num_expert_group=2", "llama.cpp"),
    (dict(linear_num_heads=2), "k3", "linear_num_heads=2", "llama.cpp"),
    (dict(layer_types=["full_attention"] * 4), "k3", "layer_types=", "llama.cpp"),
    (dict(layer_types=["linear_attention"] * 4), "k3", "layer_types=", "llama.cpp"),
]
BUILT_REFUSALS = [("mla_use_nope", False, "mla_use_nope=False"),
                  ("moe_router_activation_func", "softmax", "moe_router_activation_func='softmax'")]


@pytest.mark.parametrize("overrides, to, field, runtime", REFUSALS)
def test_refused_by_name_exit_2_nothing_written(overrides, to, field, runtime, tmp_path, capsys):
    folder = k3_folder(tmp_path / "in", **overrides)
    out = tmp_path / "out"
    assert export([str(folder), str(out), "--to", to, "--no-progress"]) == 2
    message = capsys.readouterr().err
    assert field in message and runtime in message and "nothing was written" in message
    assert not out.exists() and not list(tmp_path.glob(".out*"))  # no temporary folder either


@pytest.mark.parametrize("field, value, named", BUILT_REFUSALS)
def test_non_k3_pieces_refused_for_k3(field, value, named):
    config = tiny_k3_config()
    config.__dict__[field] = value  # a value the config constructor already refuses; the export rule must too
    with pytest.raises(ExportRefused, match=f"{named}.*llama.cpp"):
        check_representable(config, "k3")


def test_standard_residual_kimi_linear_is_not_a_k3_model(tmp_path):
    """Kimi Linear itself (SiLU, no K3 pieces) exports for vLLM only."""
    from hf_attnres.utils.tiny import tiny_config

    model = KimiLinearAttnResForCausalLM(tiny_config("standard", 0, 3, family="kimi_linear"))
    model.save_pretrained(tmp_path / "kl")
    with pytest.raises(ExportRefused, match="(?s)attn_res_mode='standard'.*hidden_act='silu'"):
        export_checkpoint(tmp_path / "kl", tmp_path / "k3", to="k3", progress=False)
    export_checkpoint(tmp_path / "kl", tmp_path / "out", to="kimi-linear", verify=True, progress=False)
    assert "attn_res_block_size" not in json.loads((tmp_path / "out" / "config.json").read_text())  # unset: off


def test_k3_small_preset_is_exportable_to_k3():
    from hf_attnres.utils.tiny import tiny_config

    preset = K3_SMALL_PRESET
    config = tiny_config("block", preset.block_size, preset.num_layers, **preset.fields("kimi_linear"),
                         family="kimi_linear")
    check_representable(config, "k3")
    assert config.hidden_act == "situ" and config.mla_use_output_gate and config.routed_expert_hidden_size


def test_fine_tuned_k3_folder_goes_back_to_k3(source, tmp_path):
    """K3 folder -> train.py --init-from (2 steps) -> export --to k3 -> loads back with the trained model's logits."""
    from hf_attnres.cli.prepare_data import main as prepare
    from hf_attnres.cli.train import main as train
    from tests.helpers.toolchain_fixtures import finetune_args
    from tests.helpers.train_fixtures import write_documents

    data = tmp_path / "data"
    prepare(["--files", *map(str, write_documents(tmp_path / "text", count=3)), "--tokenizer", str(source),
             "--seq-len", "16", "--validation-fraction", "0.2", "--output-dir", str(data)])
    train(finetune_args(data, source, tmp_path / "run", max_steps=2, save_every=2, eval_every=2,
                        diagnostics_every=2))
    trained = KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / "run" / "final")
    assert not torch.equal(trained.model.embed_tokens.weight,
                           KimiLinearAttnResForCausalLM.from_pretrained(source).model.embed_tokens.weight)
    export([str(tmp_path / "run" / "final"), str(tmp_path / "k3"), "--to", "k3", "--verify", "--no-progress"])
    assert json.loads((tmp_path / "k3" / "config.json").read_text())["model_type"] == "kimi_k3"
    ids = torch.randint(0, 300, (2, 8))
    assert torch.equal(logits(KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / "k3"), ids), logits(trained, ids))


def test_auto_classes_resolve_kimi_k3(source):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    if "kimi_k3" in CONFIG_MAPPING_NAMES:  # transformers ships its own: ours must step aside
        assert CONFIG_MAPPING["kimi_k3"].__module__.startswith("transformers.")
        return
    config = AutoConfig.from_pretrained(source)
    assert type(config).__name__ == "KimiLinearAttnResConfig" and config.hidden_act == "situ"
    model = AutoModelForCausalLM.from_pretrained(source)
    assert isinstance(model, KimiLinearAttnResForCausalLM)
    ids = torch.randint(0, 300, (1, 6))
    assert torch.equal(logits(model, ids), logits(KimiLinearAttnResForCausalLM.from_pretrained(source), ids))


def test_init_only_fields_do_not_block_an_export(tmp_path):
    """A model from a study arm with another initialization (attn_res_query_init_std, attn_res_key_norm_init) is an
    ordinary trained model: it exports, and the runtime's config does not carry the init fields."""
    from hf_attnres.utils.tiny import tiny_config

    model = KimiLinearAttnResForCausalLM(tiny_config("block", 1, 3, attn_res_query_init_std=0.1,
                                                     attn_res_key_norm_init=4.0, family="kimi_linear"))
    model.save_pretrained(tmp_path / "arm")
    export_checkpoint(tmp_path / "arm", tmp_path / "out", to="kimi-linear", verify=True, progress=False)
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "attn_res_query_init_std" not in exported and "attn_res_key_norm_init" not in exported
