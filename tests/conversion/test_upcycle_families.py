"""Upcycling a standard checkpoint of every supported family: `hf_attnres.upcycle(model)` and `attnres convert
--upcycle` on its folder. The upcycled model is the source with each reading norm's epsilon times n^2 (to rounding),
so its logits equal the source's within the tolerance that epsilon states (`hf_attnres.conversion.upcycle_check`)."""
import pytest
import torch
from transformers import AutoModelForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM

import hf_attnres
from hf_attnres.cli.convert import main as convert_main
from hf_attnres.conversion.upcycle_check import compare, eps_scaled_copy
from hf_attnres.families.upcycle import UpcycleError
from tests.families.tiny import FAMILIES, attn_res_model, random_ids, source_model

FAMILY_NAMES = sorted(FAMILIES)
UPCYCLES = [("block", 2), ("block", None), ("full", None)]


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize(("mode", "block_size"), UPCYCLES)
def test_upcycled_logits_equal_the_source_within_the_epsilon_tolerance(family, mode, block_size):
    source = source_model(family)
    model = hf_attnres.upcycle(source, mode, block_size)
    assert model.config.model_type == f"{family}_attnres" and model.config.attn_res_mode == mode
    ids = random_ids(batch=2, seq=12)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    with torch.no_grad():
        # the argument, exactly: the source with eps * n^2 at each reading norm computes the same function
        torch.testing.assert_close(model(ids, attention_mask=mask).logits,
                                   eps_scaled_copy(source, model)(ids, attention_mask=mask).logits,
                                   rtol=1e-5, atol=1e-6)
    report = compare(source, model, ids, mask)
    assert report["max_abs_diff"] <= report["tolerance"], report
    assert report["top1_agreement"] >= 0.9, report


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_upcycle_keeps_dtype_weights_and_family(family):
    source = source_model(family).to(torch.bfloat16)
    model = hf_attnres.upcycle(source, "full")
    assert next(model.parameters()).dtype == torch.bfloat16
    state = model.state_dict()
    for name, tensor in source.state_dict().items():
        assert torch.equal(state[name], tensor), name
    assert isinstance(model, type(source))  # the family's own ForCausalLM is a base: the same family
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied == bool(source.config.tie_word_embeddings)


def test_upcycle_refuses_an_attn_res_model_by_name():
    upcycled = hf_attnres.upcycle(source_model("llama"), "block", 2)
    with pytest.raises(UpcycleError, match="'llama_attnres' with attn_res_mode='block' is already AttnRes"):
        hf_attnres.upcycle(upcycled, "full")


def test_a_standard_mode_attn_res_model_upcycles():
    standard = attn_res_model("qwen3", mode="standard")
    assert hf_attnres.upcycle(standard, "full").config.attn_res_mode == "full"


def test_an_unsupported_family_is_refused_with_the_reason():
    tiny = GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4)
    with pytest.raises(UpcycleError, match="'gpt_neox' is not supported by AttnRes: parallel residual"):
        hf_attnres.upcycle(GPTNeoXForCausalLM(tiny))


@pytest.mark.parametrize(("mode", "block_size", "named"), [
    ("blocks", None, "mode must be one of"),
    ("block", 0, "block_size must be an integer >= 1"),
    ("block", "2", "block_size must be an integer >= 1"),
    ("block", 5, "block_size 5 is more than the model's 4 decoder layers"),
    ("block", 1000, "block_size 1000 is more than the model's 4 decoder layers"),
    ("full", 2, "block_size applies to mode block or gated only"),
])
def test_bad_modes_and_block_sizes_are_refused_by_their_python_names(mode, block_size, named):
    with pytest.raises(UpcycleError, match=named) as refused:
        hf_attnres.upcycle(source_model("llama"), mode, block_size)
    assert "--" not in str(refused.value)  # the arguments as a Python caller spells them, not the command's flags


def test_one_block_of_every_layer_is_the_largest_block():
    model = hf_attnres.upcycle(source_model("llama"), "block", 4)
    assert model.config.attn_res_block_size == 4 and model.config.attn_res_num_blocks == 1


def test_an_integer_of_another_type_is_a_block_size():
    import numpy

    model = hf_attnres.upcycle(source_model("llama"), "block", numpy.int64(2))
    assert type(model.config.attn_res_block_size) is int and model.config.attn_res_num_blocks == 2


def int8_weight(model):
    layer = model.model.layers[1].mlp
    layer.up_proj.weight = torch.nn.Parameter(layer.up_proj.weight.to(torch.int8), requires_grad=False)
    return model


def nan_weight(model):
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    return model


def dynamically_quantized(model):
    return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def bare_decoder(model):
    return model.model  # LlamaModel: the decoder without its lm_head


# what `attnres convert` refuses in a file, refused in a loaded model: (damage, error class, words)
SOURCE_MODEL_CASES = {
    "int8_weight": (int8_weight, UpcycleError, "tensor model.layers.1.mlp.up_proj.weight is torch.int8"),
    "nan_weight": (nan_weight, UpcycleError, "tensor model.layers.1.mlp.up_proj.weight holds non-finite values"),
    "dynamically_quantized": (dynamically_quantized, UpcycleError,
                              "quantized \\(torch dynamic quantization: model.layers.0.self_attn.q_proj"),
    "bare_decoder": (bare_decoder, TypeError, "expected a causal LM \\(…ForCausalLM.*got LlamaModel"),
}


@pytest.mark.parametrize("rebuild", ["upcycle", "plain_family_model"])
@pytest.mark.parametrize(("damage", "error", "named"), SOURCE_MODEL_CASES.values(), ids=SOURCE_MODEL_CASES.keys())
def test_a_model_the_command_would_refuse_is_refused_in_one_line(rebuild, damage, error, named):
    from hf_attnres.families import upcycle as upcycling

    with pytest.raises(error, match=named) as refused:
        getattr(upcycling, rebuild)(damage(source_model("llama")))
    assert isinstance(refused.value, ValueError) and "\n" not in str(refused.value)


def test_convert_upcycles_a_family_folder_as_the_python_call_does(tmp_path, capsys):
    source = source_model("mistral")
    source.save_pretrained(tmp_path / "in")
    code = convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--upcycle", "block", "--block-size", "2",
                         "--verify", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert "(mistral) ->" in capsys.readouterr().out
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = random_ids()
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, hf_attnres.upcycle(source, "block", 2)(ids).logits)


@pytest.mark.parametrize("family", ["qwen3", "gemma3_text"])
def test_convert_upcycles_to_the_gated_read_and_checks_it_to_rounding(family, tmp_path, capsys):
    """`--upcycle gated` writes the Python call's model; `--check` judges it against the rounding of the gated read
    (it reads the standard stream itself), not Block's epsilon bound, which a tiny model's activations make
    inconclusive."""
    source = source_model(family)
    source.save_pretrained(tmp_path / "in")
    code = convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--upcycle", "gated", "--block-size", "2",
                         "--check", "--no-progress"])
    assert code == 0, capsys.readouterr().err  # --check passed: within a conclusive tolerance
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert loaded.config.attn_res_gated_read and loaded.config.attn_res_mode == "block"
    ids = random_ids()
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, hf_attnres.upcycle(source, "gated", 2)(ids).logits)
    report = compare(source, loaded, ids)
    assert report["max_abs_diff"] <= report["tolerance"] <= 1e-3 * report["max_abs_logit"], report


def test_convert_upcycles_a_kimi_linear_checkpoint_to_the_gated_read(tmp_path):
    """Kimi Linear's own converter takes the gated mode and its block size too: the gates written zero, the
    function the source's to rounding."""
    from hf_attnres.conversion import convert_checkpoint
    from hf_attnres.families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM
    from hf_attnres.utils.tiny import tiny_config

    torch.manual_seed(0)
    source = KimiLinearAttnResForCausalLM(tiny_config("standard", 0, 4, vocab_size=96, family="kimi_linear")).eval()
    source.save_pretrained(tmp_path / "in")
    convert_checkpoint(tmp_path / "in", tmp_path / "out", upcycle="gated", block_size=2, verify=True, progress=False)
    loaded = KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert (loaded.config.attn_res_mode, loaded.config.attn_res_block_size) == ("block", 2)
    gates = [t for name, t in loaded.state_dict().items() if name.endswith("_res_gate.weight")]
    assert len(gates) == 2 * 4 + 1 and not any(g.any() for g in gates)
    ids = random_ids()
    with torch.no_grad():
        expected = source(ids).logits
        torch.testing.assert_close(loaded(ids).logits, expected, rtol=0, atol=1e-5 * float(expected.abs().max()))


def test_convert_refusals_name_the_reason_and_write_nothing(tmp_path, capsys):
    source_model("llama").save_pretrained(tmp_path / "llama")
    GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4)).save_pretrained(tmp_path / "neox")
    nan = source_model("llama")
    with torch.no_grad():
        nan.model.layers[1].mlp.up_proj.weight[0, 0] = float("nan")
    nan.save_pretrained(tmp_path / "llama-nan")
    out = tmp_path / "out"
    cases = [
        ([str(tmp_path / "llama-nan"), str(out), "--upcycle", "block"],
         "tensor model.layers.1.mlp.up_proj.weight holds non-finite values (1 NaN"),
        ([str(tmp_path / "neox"), str(out), "--upcycle", "block"], "'gpt_neox' is not supported by AttnRes"),
        ([str(tmp_path / "llama"), str(out), "--upcycle", "full", "--block-size", "2"], "--block-size"),
        ([str(tmp_path / "llama"), str(out), "--upcycle", "block", "--to", "moonshot"], "Kimi Linear's layout"),
        ([str(tmp_path / "missing.gguf"), str(out), "--upcycle", "block"], "not found"),
    ]
    for argv, named in cases:
        assert convert_main([*argv, "--no-progress"]) == 1, argv
        assert named in capsys.readouterr().err, argv
        assert not out.exists() and not list(tmp_path.glob(".out*"))
    convert_main([str(tmp_path / "llama"), str(out), "--upcycle", "full", "--no-progress"])
    assert convert_main([str(tmp_path / "llama"), str(out), "--upcycle", "block", "--no-progress"]) == 1
    assert "exists" in capsys.readouterr().err


def test_export_for_serving_refuses_other_families_by_name(tmp_path):
    from hf_attnres.conversion.kimi_linear.export import export_checkpoint
    from hf_attnres.conversion.kimi_linear.runtimes import ExportRefused

    hf_attnres.upcycle(source_model("llama"), "block", 2).save_pretrained(tmp_path / "llama-block")
    with pytest.raises(ExportRefused, match="model_type 'llama_attnres': export for serving writes Kimi K3's layout"):
        export_checkpoint(tmp_path / "llama-block", tmp_path / "out")
    assert not (tmp_path / "out").exists()
