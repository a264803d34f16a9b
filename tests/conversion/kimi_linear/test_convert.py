"""Moonshot <-> HF-native conversion: layout facts, direct loading, round trips, upcycling, safety, errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import hf_attnres
from hf_attnres.conversion import ConversionError, convert_checkpoint, convert_tensors, verify_conversion
from hf_attnres.conversion.kimi_linear.fixtures import random_model, write_moonshot_checkpoint
from hf_attnres.conversion.kimi_linear.plan import plan_conversion
from hf_attnres.conversion.kimi_linear.reader import CheckpointReader
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.remote_loading import auto_map, load_in_clean_process, write_tokenizer

MODES = ("standard", "block", "full")
SHARD = "150KB"  # tiny models are ~1 MB: several shards in and out
# moe_intermediate 24 != hidden 64 / 2: a transposed or swapped expert weight changes shape, and shows
MOE_I = 24


def make_config(mode="block", **overrides):
    return tiny_config(mode, 2, moe_intermediate_size=MOE_I, **overrides, family="kimi_linear")


def kimi_linear_config():
    """The standard tiny config as transformers' own KimiLinearConfig (model_type "kimi_linear")."""
    from transformers import KimiLinearConfig

    fields = make_config("standard").to_diff_dict()
    for key in ("attn_res_mode", "attn_res_block_size", "attn_res_backend", "model_type"):
        fields.pop(key, None)
    return KimiLinearConfig(**fields)


def load(folder):
    return hf_attnres.KimiLinearAttnResForCausalLM.from_pretrained(folder).eval()


def logits(model, seed=0):
    ids = torch.randint(3, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model(ids).logits


def read_all(folder) -> dict[str, torch.Tensor]:
    reader = CheckpointReader(folder)
    return reader.load(list(reader.tensors))


@pytest.fixture(scope="module", params=MODES)
def moonshot(request, tmp_path_factory):
    """(model, folder): a random model of each mode written in Moonshot's layout, sharded."""
    model = random_model(make_config(request.param), seed=MODES.index(request.param))
    folder = tmp_path_factory.mktemp(request.param) / "moonshot"
    return model, write_moonshot_checkpoint(folder, model, max_shard_size=SHARD)


@pytest.fixture(scope="module")
def block_folder(tmp_path_factory):
    """A sharded block-mode Moonshot checkpoint, for the tests where the mode does not matter."""
    return write_moonshot_checkpoint(tmp_path_factory.mktemp("b") / "ms", random_model(make_config("block")), SHARD)


def test_moonshot_layout_matches_kimi_linear_facts():
    """Independent of the mapping's code: w1 gate / w3 up / w2 down per expert, q/k/v convs, names Moonshot uses."""
    model = random_model(make_config("block"))
    hf = model.state_dict()
    ms = convert_tensors(dict(hf), model.config, "moonshot")
    experts = hf["model.layers.1.mlp.experts.gate_up_proj"]  # [E, 2I, H]
    assert experts.shape == (4, 2 * MOE_I, 64)
    for e in range(4):
        prefix = f"model.layers.1.block_sparse_moe.experts.{e}"
        assert torch.equal(ms[f"{prefix}.w1.weight"], experts[e, :MOE_I])
        assert torch.equal(ms[f"{prefix}.w3.weight"], experts[e, MOE_I:])
        assert torch.equal(ms[f"{prefix}.w2.weight"], hf["model.layers.1.mlp.experts.down_proj"][e])
    conv = hf["model.layers.0.self_attn.conv1d.weight"]  # [3C, 1, K]
    channels = conv.shape[0] // 3
    for i, part in enumerate("qkv"):
        assert torch.equal(ms[f"model.layers.0.self_attn.{part}_conv1d.weight"],
                           conv[i * channels : (i + 1) * channels])
    assert torch.equal(ms["model.layers.0.self_attn.A_log"], hf["model.layers.0.self_attn.forget_gate.A_log"])
    assert ms["model.layers.0.self_attn.A_log"].shape == (1, 1, model.config.linear_num_heads, 1)
    assert "model.layers.1.block_sparse_moe.gate.e_score_correction_bias" in ms
    assert "model.layers.1.block_sparse_moe.shared_experts.up_proj.weight" in ms
    # the dense first MLP keeps Moonshot's `mlp` name (transformers' generic rename would move it)
    assert "model.layers.0.mlp.gate_proj.weight" in ms and not any("layers.0.block_sparse_moe" in k for k in ms)
    assert torch.equal(ms["model.layers.3.mlp_res_proj.weight"], hf["model.layers.3.mlp_res_proj.weight"])
    assert ms["model.output_attn_res_proj.weight"].shape == (1, 64)


def test_moonshot_config_is_one_indexed():
    from hf_attnres.conversion.kimi_linear.config import moonshot_config_dict, parse_config

    config = make_config("block")
    moonshot = moonshot_config_dict(config)
    assert moonshot["model_type"] == "kimi_linear" and "layer_types" not in moonshot
    assert moonshot["linear_attn_config"]["full_attn_layers"] == [3, 5]  # layers 2 and 4, 0-indexed
    assert moonshot["first_k_dense_replace"] == 1 and moonshot["num_experts"] == 4
    parsed = parse_config(moonshot)
    assert parsed.layer_types == config.layer_types and parsed.mlp_layer_types == config.mlp_layer_types
    assert (parsed.attn_res_mode, parsed.attn_res_block_size) == ("block", 2)
    # Moonshot's rule: MoE from first_k_dense_replace on, every moe_layer_freq-th layer
    sparse_every_other = parse_config({**moonshot, "moe_layer_freq": 2})
    assert sparse_every_other.mlp_layer_types == ["dense", "dense", "sparse", "dense", "sparse"]


def test_from_pretrained_reads_moonshot_folder(moonshot):
    model, folder = moonshot
    assert torch.equal(logits(load(folder)), logits(model))


def test_from_pretrained_reads_k3_wrapped_folder(tmp_path):
    model = random_model(make_config("block"))
    folder = write_moonshot_checkpoint(tmp_path / "k3", model, wrap=True, vision_tensors=True)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "kimi_k3"
    assert torch.equal(logits(load(folder)), logits(model))


def test_round_trip_is_exact(moonshot, tmp_path):
    model, folder = moonshot
    hf = convert_checkpoint(folder, tmp_path / "hf", verify=True, max_shard_size=SHARD, progress=False)
    assert hf.source_layout == "moonshot" and len(list((tmp_path / "hf").glob("*.safetensors"))) > 1
    assert torch.equal(logits(load(tmp_path / "hf")), logits(model))
    assert read_all(tmp_path / "hf").keys() == model.state_dict().keys()
    convert_checkpoint(tmp_path / "hf", tmp_path / "back", to="moonshot", verify=True, max_shard_size=SHARD,
                       progress=False)
    original, back = read_all(folder), read_all(tmp_path / "back")
    assert original.keys() == back.keys()
    for name, tensor in original.items():
        assert torch.equal(back[name], tensor) and back[name].dtype == tensor.dtype, name
    assert (json.loads((tmp_path / "back" / "config.json").read_text())
            == json.loads((folder / "config.json").read_text()))


def test_bf16_k3_wrapped_checkpoint_converts(tmp_path):
    model = random_model(make_config("full")).to(torch.bfloat16)
    folder = write_moonshot_checkpoint(tmp_path / "k3", model, wrap=True, vision_tensors=True)
    plan = convert_checkpoint(folder, tmp_path / "hf", verify=True, progress=False)
    assert plan.reader.skipped == ["vision_tower.patch_embed.weight"]
    converted = read_all(tmp_path / "hf")
    assert all(t.dtype == torch.bfloat16 for t in converted.values())
    assert all(torch.equal(converted[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("mode", ["block", "full"])
def test_upcycle_transformers_checkpoint(tmp_path, mode):
    """transformers' own KimiLinearForCausalLM checkpoint -> AttnRes: weights kept, queries zero, norms one."""
    from transformers import KimiLinearForCausalLM

    torch.manual_seed(1)
    base = KimiLinearForCausalLM(kimi_linear_config()).eval()
    base.save_pretrained(tmp_path / "kimi")  # transformers writes Moonshot's layout by default
    block_size = 2 if mode == "block" else None
    plan = convert_checkpoint(tmp_path / "kimi", tmp_path / "up", upcycle=mode, block_size=block_size, verify=True,
                              progress=False)
    assert plan.source_layout == "moonshot"
    up = load(tmp_path / "up")
    assert (up.config.attn_res_mode, up.config.attn_res_block_size) == (mode, block_size or 0)
    state = up.state_dict()
    for name, tensor in base.state_dict().items():
        assert torch.equal(state[name], tensor), name
    new = [name for name in state if name not in base.state_dict()]
    assert new and all(("_res_proj" in n and not state[n].any()) or ("_res_norm" in n and (state[n] == 1).all())
                       for n in new)
    with torch.no_grad():
        out = up(torch.randint(3, 256, (1, 6)), output_attn_res_weights=True)
    for weights in out.attn_res_weights:  # zero queries: a uniform softmax over depth at every mix point
        assert torch.allclose(weights, torch.full_like(weights, 1 / weights.shape[-1]))


def test_transformers_saved_kimi_linear_loads_and_saves_moonshot_names(tmp_path):
    """transformers' own KimiLinear save puts the dense first MLP under `block_sparse_moe`: we read that, and our
    `save_pretrained` writes Moonshot's own names (dense MLP under `mlp`), which transformers reads back too."""
    from transformers import KimiLinearForCausalLM

    model = random_model(make_config("standard"))
    reference = KimiLinearForCausalLM(kimi_linear_config()).eval()
    reference.load_state_dict(model.state_dict())
    reference.save_pretrained(tmp_path / "kimi")
    with safe_open(tmp_path / "kimi" / "model.safetensors", "pt") as handle:
        assert "model.layers.0.block_sparse_moe.gate_proj.weight" in handle.keys()
    assert torch.equal(logits(load(tmp_path / "kimi")), logits(model))
    model.save_pretrained(tmp_path / "ours")
    with safe_open(tmp_path / "ours" / "model.safetensors", "pt") as handle:
        names = set(handle.keys())
    assert ("model.layers.0.mlp.gate_proj.weight" in names
            and "model.layers.1.block_sparse_moe.experts.0.w1.weight" in names)
    assert torch.equal(logits(KimiLinearForCausalLM.from_pretrained(tmp_path / "ours").eval()), logits(model))


def test_hf_native_input_reshards_and_upcycles(tmp_path):
    model = random_model(make_config("standard"))
    model.save_pretrained(tmp_path / "hf", save_original_format=False)
    plan = convert_checkpoint(tmp_path / "hf", tmp_path / "up", upcycle="full", verify=True, max_shard_size=SHARD,
                              progress=False)
    assert plan.source_layout == "hf" and len(list((tmp_path / "up").glob("*.safetensors"))) > 1
    up = read_all(tmp_path / "up")
    assert all(torch.equal(up[name], tensor) for name, tensor in model.state_dict().items())
    assert load(tmp_path / "up").config.attn_res_mode == "full"


def test_standard_conversion_matches_transformers_model(tmp_path):
    from transformers import KimiLinearForCausalLM

    model = random_model(make_config("standard"))
    folder = write_moonshot_checkpoint(tmp_path / "ms", model)
    convert_checkpoint(folder, tmp_path / "hf", progress=False)
    reference = KimiLinearForCausalLM.from_pretrained(folder).eval()  # transformers reads Moonshot's layout itself
    assert torch.equal(logits(load(tmp_path / "hf")), logits(reference))


def test_converted_folder_loads_where_attnres_is_not_installed(tmp_path):
    """The HF-native output is a complete model folder: code files, auto_map, the input's tokenizer."""
    model = random_model(make_config("block"))
    folder = write_moonshot_checkpoint(tmp_path / "ms", model)
    write_tokenizer(folder)
    convert_checkpoint(folder, tmp_path / "hf", progress=False)
    assert (auto_map(tmp_path / "hf")["AutoModelForCausalLM"]
            == "modeling_kimi_linear_attnres.KimiLinearAttnResForCausalLM")
    ids = torch.randint(3, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    result = load_in_clean_process(tmp_path / "hf", ids, tmp_path / "run", tmp_path / "home", tokenizer=True)
    with torch.no_grad():
        torch.testing.assert_close(result["logits"], model.eval()(ids).logits)
    assert result["tokens"] == [5, 7, 9]


# --- safety: atomic output, --force, verification ---------------------------------------------------------------

def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_existing_output_needs_force(block_folder, tmp_path):
    folder = block_folder
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(ConversionError, match="already exists.*--force"):
        convert_checkpoint(folder, out, progress=False)
    assert (out / "keep.txt").read_text() == "old"
    convert_checkpoint(folder, out, force=True, progress=False)
    assert not (out / "keep.txt").exists() and (out / "config.json").is_file() and not leftovers(tmp_path)


def test_interrupted_conversion_leaves_nothing(block_folder, tmp_path, monkeypatch):
    from hf_attnres.conversion.kimi_linear import writer

    folder = block_folder
    calls = []

    def failing_add(self, name, tensor):
        calls.append(name)
        if len(calls) == 20:
            raise KeyboardInterrupt("simulated interruption")
        return original_add(self, name, tensor)

    original_add = writer.ShardedWriter.add
    monkeypatch.setattr(writer.ShardedWriter, "add", failing_add)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(folder, tmp_path / "out", max_shard_size=SHARD, progress=False)
    assert len(calls) == 20 and not (tmp_path / "out").exists() and not leftovers(tmp_path)


def test_verify_catches_a_changed_tensor(block_folder, tmp_path):
    folder = block_folder
    convert_checkpoint(folder, tmp_path / "hf", max_shard_size=SHARD, progress=False)
    plan = plan_conversion(folder)
    verify_conversion(plan, tmp_path / "hf", progress=False)  # intact: passes
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())["weight_map"]
    victim = "model.layers.1.mlp.experts.gate_up_proj"
    shard = tmp_path / "hf" / index[victim]
    with safe_open(shard, "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    tensors[victim][0, 0, 0] += 1
    save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(ConversionError, match=victim):
        verify_conversion(plan, tmp_path / "hf", progress=False)


# --- errors: each names the tensor (or field) and what was expected, and writes nothing ----------------------------

def edit_tensors(folder: Path, edit) -> None:
    """Rewrite a checkpoint folder's tensors through `edit(dict)` as one file."""
    tensors = read_all(folder)
    edit(tensors)
    for path in folder.glob("model*.safetensors*"):
        path.unlink()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def drop(name):
    return lambda t: t.pop(name)


def add_packed_4bit(t):
    """compressed-tensors style packed int4 experts: int32 words instead of the float weight."""
    weight = t.pop("model.layers.2.block_sparse_moe.experts.1.w1.weight")
    t["model.layers.2.block_sparse_moe.experts.1.w1.weight_packed"] = torch.zeros(weight.shape[0], weight.shape[1] // 8,
                                                                                  dtype=torch.int32)


def reshape(name, shape):
    def edit(t):
        t[name] = torch.zeros(shape)
    return edit


ERROR_CASES = {
    "missing": (drop("model.layers.3.block_sparse_moe.experts.2.w3.weight"),
                r"model\.layers\.3\.block_sparse_moe\.experts\.2\.w3\.weight: missing \(expected shape \[24, 64\]\)"),
    "unexpected": (lambda t: t.update({"model.layers.1.self_attn.extra.weight": torch.zeros(2)}),
                   r"model\.layers\.1\.self_attn\.extra\.weight: unexpected"),
    "shape": (reshape("model.layers.0.self_attn.q_conv1d.weight", (32, 1, 3)),
              r"model\.layers\.0\.self_attn\.q_conv1d\.weight: shape \[32, 1, 3\], expected \[32, 1, 4\]"),
    "dtype": (lambda t: t.update({"model.norm.weight": t["model.norm.weight"].to(torch.float64)}),
              r"model\.norm\.weight: dtype F64 is not supported"),
    "float8": (lambda t: t.update({"model.norm.weight": t["model.norm.weight"].to(torch.float8_e4m3fn)}),
               r"model\.norm\.weight: dtype F8_E4M3 is not supported"),
    "packed_4bit": (add_packed_4bit, r"experts\.1\.w1\.weight_packed: dtype I32 is not supported.*dequantized"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_bad_tensors_are_named_and_nothing_is_written(tmp_path, case):
    edit, message = ERROR_CASES[case]
    folder = write_moonshot_checkpoint(tmp_path / "ms", random_model(make_config("block")))
    edit_tensors(folder, edit)
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(folder, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)


def test_bad_configs_are_named_and_nothing_is_written(tmp_path):
    folder = write_moonshot_checkpoint(tmp_path / "ms", random_model(make_config("standard")))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config,
                                                    "quantization_config": {"quant_method": "compressed-tensors"}}))
    with pytest.raises(ConversionError, match="quantization_config.*compressed-tensors"):
        convert_checkpoint(folder, tmp_path / "out", progress=False)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="--block-size must be an integer >= 1"):
        convert_checkpoint(folder, tmp_path / "out", upcycle="block", block_size=0, progress=False)
    hf = make_config("block", mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse"])
    hf_folder = tmp_path / "hf"
    random_model(hf).save_pretrained(hf_folder, save_original_format=False)
    with pytest.raises(ConversionError, match="mlp_layer_types=.*no Moonshot equivalent"):
        convert_checkpoint(hf_folder, tmp_path / "out", to="moonshot", progress=False)
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)


def test_upcycle_refuses_attn_res_checkpoint(block_folder, tmp_path):
    with pytest.raises(ConversionError, match="needs a standard-residual checkpoint.*attn_res_mode='block'"):
        convert_checkpoint(block_folder, tmp_path / "out", upcycle="full", progress=False)
    assert not (tmp_path / "out").exists()


def test_script_cli(tmp_path, capsys):
    from hf_attnres.cli import convert as script
    folder = write_moonshot_checkpoint(tmp_path / "ms", random_model(make_config("standard")))
    (folder / "tokenizer_config.json").write_text("{}")
    assert script.main([str(folder), str(tmp_path / "up"), "--upcycle", "block", "--block-size", "3", "--verify",
                        "--no-progress", "--max-shard-size", "200KB"]) == 0
    assert "attn_res_mode=block" in capsys.readouterr().out
    assert (tmp_path / "up" / "tokenizer_config.json").is_file()  # side files travel with the weights
    assert load(tmp_path / "up").config.attn_res_num_blocks == 2
    assert script.main([str(folder), str(tmp_path / "up"), "--no-progress"]) == 1
    assert "already exists" in capsys.readouterr().err
