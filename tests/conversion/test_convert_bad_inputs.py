"""Bad input to `attnres convert` (hf_attnres.cli.convert, run in-process through main(), exit code and message
checked): output folders that overlap the input, damaged checkpoints of Kimi Linear and of every other family (plain
and upcycled), bad config fields, bad flags and paths; stale temporary folders recovered."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from hf_attnres.cli import convert as convert_cli
from hf_attnres.folders.atomic_io import recover_interrupted
from tests.families.tiny import FAMILIES, source_model
from tests.helpers.bad_input_fixtures import (
    CONFIG_DTYPE_DAMAGE,
    INDEX_DAMAGE,
    MODEL_FOLDER_DAMAGE,
    NONFINITE_DAMAGE,
    SENTINEL,
    damaged_copy,
    expect_script_refused,
    first_shard,
    overwrite_json,
    truncate,
)
from tests.helpers.processes import dead_pid
from tests.helpers.tiny_gguf import write_llama_gguf


@pytest.fixture(scope="module")
def convert():
    return convert_cli.main


def run_refused(convert, capsys, argv, named, untouched=(), absent=()):
    return expect_script_refused(convert, capsys, [*argv, "--no-progress"], named, untouched, absent)


# (argv builder (input, tmp) -> argv, words, extra paths that must not appear)
OVERLAP_CASES = {
    "output_is_input": (lambda src, tmp: [src, src, "--force"], ["is the input"]),
    "output_is_parent_of_input": (lambda src, tmp: [src, src.parent, "--force"], ["contains the input"]),
    "output_inside_input": (lambda src, tmp: [src, src / "converted"], ["lies inside the input"]),
    "output_is_a_file": (lambda src, tmp: [src, src / "notes.txt", "--force"], ["notes.txt"]),
    "output_exists_without_force": (lambda src, tmp: [src, src.parent / "prev"], ["already exists", "--force"]),
    "output_under_a_file": (lambda src, tmp: [src, src / "notes.txt" / "out"], ["notes.txt"]),
}


@pytest.mark.parametrize("argv, named", OVERLAP_CASES.values(), ids=OVERLAP_CASES.keys())
def test_output_overlapping_input_refused(convert, capsys, moonshot_checkpoint, tmp_path, monkeypatch, argv, named):
    src = shutil.copytree(moonshot_checkpoint, tmp_path / "models" / "kimi")
    (tmp_path / "models" / "sibling.txt").write_text(SENTINEL)
    (tmp_path / "models" / "prev").mkdir()
    monkeypatch.chdir(tmp_path / "models")
    run_refused(convert, capsys, argv(src, tmp_path), named, untouched=[tmp_path / "models"])


FLAG_CASES = {
    "max_shard_size_banana": (["--max-shard-size", "banana"], ["--max-shard-size", "banana"]),
    "max_shard_size_zero": (["--max-shard-size", "0GB"], ["--max-shard-size"]),
    "max_shard_size_negative": (["--max-shard-size=-1GB"], ["--max-shard-size"]),
    "block_size_without_upcycle": (["--block-size", "2"], ["--block-size", "--upcycle"]),
    "block_size_with_full": (["--upcycle", "full", "--block-size", "2"], ["--block-size"]),
    "block_size_zero": (["--upcycle", "block", "--block-size", "0"], ["--block-size"]),
    "block_size_beyond_layers": (["--upcycle", "block", "--block-size", "1000"],
                                 ["--block-size 1000 is more than the model's", "decoder layers"]),
}


@pytest.mark.parametrize("flags, named", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_bad_flags_refused(convert, capsys, moonshot_checkpoint, tmp_path, flags, named):
    out = tmp_path / "out"
    run_refused(convert, capsys, [moonshot_checkpoint, out, *flags], named, untouched=[moonshot_checkpoint],
                absent=[out])


KIMI_CONFIG_CASES = {
    "attn_res_mode_wrong_case": (lambda f: overwrite_json(f / "config.json", attn_res_mode="Block"),
                                 ["attn_res_mode", "'Block'"]),
    "layers_1e9": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=10**9),
                   ["config.json", "num_hidden_layers=1000000000"]),
}
INPUT_CASES = {**MODEL_FOLDER_DAMAGE, **INDEX_DAMAGE, **CONFIG_DTYPE_DAMAGE, **NONFINITE_DAMAGE, **KIMI_CONFIG_CASES}


@pytest.mark.parametrize("damage, named", INPUT_CASES.values(), ids=INPUT_CASES.keys())
def test_damaged_input_refused(convert, capsys, moonshot_checkpoint, tmp_path, damage, named):
    src = damaged_copy(moonshot_checkpoint, tmp_path, damage)
    out = tmp_path / "out"
    run_refused(convert, capsys, [src, out], named, untouched=[src], absent=[out])


def test_output_is_the_current_folder(convert, capsys, moonshot_checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text(SENTINEL)
    run_refused(convert, capsys, [moonshot_checkpoint, ".", "--force"], ["current folder"], untouched=[tmp_path])


def test_missing_input_folder(convert, capsys, tmp_path):
    run_refused(convert, capsys, [tmp_path / "nowhere", tmp_path / "out"], ["nowhere"], absent=[tmp_path / "out"])


def test_input_without_output_refused_by_argparse(convert, capsys, moonshot_checkpoint):
    """INPUT alone (ConvertArgs.conflicts): argparse's usage error, exit 2, before any work."""
    with pytest.raises(SystemExit) as stop:
        convert([str(moonshot_checkpoint)])
    assert stop.value.code == 2
    assert "give both INPUT and OUTPUT, or neither" in capsys.readouterr().err


def test_stale_partial_of_a_killed_run_is_cleaned(convert, capsys, moonshot_checkpoint, tmp_path):
    dead = dead_pid()
    stale = tmp_path / f".out.partial-{dead}"
    stale.mkdir()
    (stale / "model.safetensors").write_text("half")
    assert convert([str(moonshot_checkpoint), str(tmp_path / "out"), "--no-progress"]) == 0
    assert not stale.exists() and (tmp_path / "out" / "config.json").is_file()


def test_replaced_output_of_a_killed_run_is_restored(tmp_path):
    """Killed between 'old output steps aside' and 'new output renamed': the old output comes back."""
    old = tmp_path / f".out.replaced-{dead_pid()}"
    old.mkdir()
    (old / "config.json").write_text("{}")
    recover_interrupted(tmp_path / "out")
    assert (tmp_path / "out" / "config.json").read_text() == "{}" and not old.exists()


# -- the family path (every family of the registry but Kimi Linear, whose folders are above): the same folder reader,
# a config validator of the family's own fields, the size guard, transformers' own missing-tensor report ----------
FAMILY_NAMES = sorted(FAMILIES)


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    for family in FAMILY_NAMES:
        source_model(family).save_pretrained(root / family)
    return root


def int8_tensor(folder, name):
    """One weight stored as int8, as a quantized export writes it: refused by name, never cast to float."""
    from safetensors.torch import load_file, save_file

    path = first_shard(folder)
    tensors = load_file(path)
    tensors[name] = tensors[name].to(torch.int8)
    save_file(tensors, path, metadata={"format": "pt"})


def add_tensor(folder, name):
    from safetensors.torch import load_file, save_file

    path = first_shard(folder)
    tensors = load_file(path)
    tensors[name] = torch.zeros(4)
    save_file(tensors, path, metadata={"format": "pt"})


def drop_tensor(folder, name):
    from safetensors.torch import load_file, save_file

    path = first_shard(folder)
    tensors = load_file(path)
    del tensors[name]
    save_file(tensors, path, metadata={"format": "pt"})


def activation_field(folder) -> str:
    return "hidden_activation" if json.loads((folder / "config.json").read_text())["model_type"] == "gemma3_text" \
        else "hidden_act"


FAMILY_CONFIG_CASES = {
    # name: (damage(folder), words the error must contain)
    "layers_absent": (lambda f: drop_json_field(f / "config.json", "num_hidden_layers"),
                      ["config.json", "num_hidden_layers", "missing"]),
    "layers_zero": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=0), ["num_hidden_layers", ">= 1"]),
    "layers_negative": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=-1),
                        ["num_hidden_layers", ">= 1"]),
    "layers_string": (lambda f: overwrite_json(f / "config.json", num_hidden_layers="4"),
                      ["num_hidden_layers", "integer", "'4'"]),
    "layers_null": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=None),
                    ["num_hidden_layers", "integer", "None"]),
    "layers_1e9": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=10**9),
                   ["num_hidden_layers=1000000000"]),
    "layers_1e9_float": (lambda f: overwrite_json(f / "config.json", num_hidden_layers=1e9),
                         ["num_hidden_layers", "integer"]),
    "heads_zero": (lambda f: overwrite_json(f / "config.json", num_attention_heads=0),
                   ["num_attention_heads", ">= 1"]),
    "hidden_negative": (lambda f: overwrite_json(f / "config.json", hidden_size=-64), ["hidden_size", ">= 1"]),
    "vocab_zero": (lambda f: overwrite_json(f / "config.json", vocab_size=0), ["vocab_size", ">= 1"]),
    "huge_vocab": (lambda f: overwrite_json(f / "config.json", vocab_size=10**12), ["GiB", "vocab_size"]),
    "eps_nan": (lambda f: overwrite_json(f / "config.json", rms_norm_eps=float("nan")), ["config.json"]),
    "eps_negative": (lambda f: overwrite_json(f / "config.json", rms_norm_eps=-1e-6), ["rms_norm_eps", "> 0"]),
    "eps_inf": (lambda f: overwrite_json(f / "config.json", rms_norm_eps=float("inf")), ["config.json"]),
    "eps_absurd": (lambda f: overwrite_json(f / "config.json", rms_norm_eps=100), ["config.json", "rms_norm_eps=100",
                                                                                  "at most 0.01"]),
    "unknown_activation": (lambda f: overwrite_json(f / "config.json", **{activation_field(f): "nope"}),
                           ["'nope'", "activation"]),
    "unknown_rope_type": (lambda f: overwrite_json(f / "config.json",
                                                   rope_parameters={"rope_type": "warp", "rope_theta": 1e4}),
                          ["rope_parameters", "'warp'"]),
    "odd_dtype": (lambda f: overwrite_json(f / "config.json", dtype="int8"), ["dtype", "'int8'"]),
    "bitsandbytes_folder": (lambda f: overwrite_json(f / "config.json", quantization_config={
        "quant_method": "bitsandbytes", "load_in_8bit": True}), ["quantization_config", "bitsandbytes"]),
    "gptq_folder": (lambda f: overwrite_json(f / "config.json", quantization_config={"quant_method": "gptq"}),
                    ["quantization_config", "gptq"]),
    # o_proj: a tensor every family has under this name (Phi-3 fuses q/k/v and gate/up)
    "int8_decoder_weight": (lambda f: int8_tensor(f, "model.layers.1.self_attn.o_proj.weight"),
                            ["model.layers.1.self_attn.o_proj.weight", "dtype I8"]),
    "missing_decoder_weight": (lambda f: drop_tensor(f, "model.layers.1.self_attn.o_proj.weight"),
                               ["model.layers.1.self_attn.o_proj.weight", "missing"]),
    "unexpected_tensor": (lambda f: add_tensor(f, "model.layers.0.mlp.extra.weight"),
                          ["model.layers.0.mlp.extra.weight", "unexpected"]),
    "attn_res_mode_wrong_case": (lambda f: overwrite_json(f / "config.json", model_type=json.loads(
        (f / "config.json").read_text())["model_type"] + "_attnres", attn_res_mode="Block"),
        ["attn_res_mode='Block'", "not a mode"]),
    "empty_weights": (lambda f: first_shard(f).write_bytes(b""), [".safetensors"]),
    "missing_weights": (lambda f: first_shard(f).unlink(), ["no *.safetensors"]),
}
FAMILY_FOLDER_CASES = {**MODEL_FOLDER_DAMAGE, **CONFIG_DTYPE_DAMAGE, **NONFINITE_DAMAGE, **FAMILY_CONFIG_CASES}
FAMILY_FOLDER_CASES.pop("no_config")  # no config.json says nothing of the family: Kimi Linear's converter names it


def drop_json_field(path, field):
    fields = json.loads(path.read_text())
    del fields[field]
    path.write_text(json.dumps(fields))


# a tied family (Gemma 3 here) has no lm_head tensor to damage
TIED = ("gemma3_text",)
FAMILY_DAMAGE = [pytest.param(family, case, id=f"{case}-{family}") for case in FAMILY_FOLDER_CASES
                 for family in FAMILY_NAMES if not (case == "lm_head_int32" and family in TIED)]


@pytest.mark.parametrize("upcycle", [[], ["--upcycle", "block"]], ids=["plain", "upcycle"])
@pytest.mark.parametrize("family, case", FAMILY_DAMAGE)
def test_damaged_family_input_refused(convert, capsys, family_folders, tmp_path, family, case, upcycle):
    damage, named = FAMILY_FOLDER_CASES[case]
    src = damaged_copy(family_folders / family, tmp_path, damage)
    out = tmp_path / "out"
    run_refused(convert, capsys, [src, out, *upcycle], named, untouched=[src], absent=[out])


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("flags, named", FLAG_CASES.values(), ids=FLAG_CASES.keys())
def test_bad_flags_refused_on_the_family_path(convert, capsys, family_folders, family, tmp_path, flags, named):
    out = tmp_path / "out"
    run_refused(convert, capsys, [family_folders / family, out, *flags], named, untouched=[family_folders / family],
                absent=[out])


def test_a_missing_untied_lm_head_is_named(convert, capsys, tmp_path):
    source_model("llama").save_pretrained(tmp_path / "llama")
    drop_tensor(tmp_path / "llama", "lm_head.weight")
    run_refused(convert, capsys, [tmp_path / "llama", tmp_path / "out"], ["lm_head.weight", "missing"],
                absent=[tmp_path / "out"])


@pytest.mark.parametrize("flag", ["output", "input"])
def test_non_utf8_paths_refused(convert, capsys, family_folders, tmp_path, flag):
    bad = tmp_path / "caf\udce9"  # the byte 0xE9 alone, as a shell passes a Latin-1 name
    argv = [family_folders / "llama", bad] if flag == "output" else [bad, tmp_path / "out"]
    run_refused(convert, capsys, argv, [flag, "not valid UTF-8"], absent=[bad, tmp_path / "out"])


@pytest.mark.parametrize("cut", ["header", "tensor_data"])
def test_truncated_gguf_refused(convert, capsys, tmp_path, cut):
    gguf = tmp_path / "model.gguf"
    if cut == "header":
        gguf.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (10).to_bytes(8, "little"))
    else:
        write_llama_gguf(source_model("llama"), gguf)
        truncate(gguf, 0.6)
    err = run_refused(convert, capsys, [gguf, tmp_path / "out"], [str(gguf), "not a readable GGUF file"],
                      absent=[tmp_path / "out"])
    assert err.count("\n") <= 2, err


@pytest.mark.parametrize(("metadata", "named"), [
    (dict(block_count=0), ["llama.block_count=0", ">= 1"]),
    (dict(head_count=0), ["llama.attention.head_count=0", ">= 1"]),
    (dict(rms_eps=-1.0), ["rms_norm_eps", "> 0"]),
], ids=["layers_zero", "heads_zero", "eps_negative"])
def test_a_gguf_file_stating_bad_sizes_is_refused(convert, capsys, tmp_path, metadata, named):
    gguf = write_llama_gguf(source_model("llama"), tmp_path / "model.gguf", **metadata)
    run_refused(convert, capsys, [gguf, tmp_path / "out"], [str(gguf), *named], untouched=[gguf],
                absent=[tmp_path / "out"])



def test_a_plain_convert_is_refused_in_its_own_words(convert, capsys, moonshot_checkpoint, tmp_path):
    """A convert without --upcycle is refused in its own words, never in an upcycle's."""
    import hf_attnres

    hf_attnres.upcycle(source_model("llama"), "block", 2).save_pretrained(tmp_path / "block")
    out = tmp_path / "out"
    cases = [
        ([tmp_path / "block", out], ["'llama_attnres' with attn_res_mode='block' is Block AttnRes", "plain model"]),
        ([moonshot_checkpoint, out, "--check"], ["--check", "Kimi Linear", "--verify"]),
    ]
    for argv, named in cases:
        err = run_refused(convert, capsys, argv, named, absent=[out])
        assert "upcycl" not in err.lower(), err
    err = run_refused(convert, capsys, [tmp_path / "block", out, "--upcycle", "full"], ["is already AttnRes"],
                      absent=[out])
    assert "upcycl" in err, err


@pytest.mark.parametrize("size", [True, 0, -1, 3.5, "banana", "1B"])
def test_python_shard_sizes_that_are_no_size_are_refused(size):
    from hf_attnres.conversion.errors import ConversionError
    from hf_attnres.conversion.guards import check_max_shard_size

    with pytest.raises(ConversionError, match="--max-shard-size"):
        check_max_shard_size(size)
    assert check_max_shard_size(200_000) == 200_000 and check_max_shard_size("5GB") == 5 * 10**9
