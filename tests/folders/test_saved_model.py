"""save_pretrained / from_pretrained with safetensors, the Auto classes, and trust_remote_code in a fresh process."""
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, KimiLinearForCausalLM

from hf_attnres import KimiLinearAttnResConfig, KimiLinearAttnResForCausalLM, KimiLinearAttnResModel
from tests.helpers.model_factory import random_ids, tiny_model


def test_round_trip_and_auto_classes(tmp_path):
    model = tiny_model("block", 3, num_layers=5)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "kimi_linear_attnres"
    assert config["attn_res_mode"] == "block" and config["attn_res_block_size"] == 3
    assert config["auto_map"]["AutoModelForCausalLM"].endswith("KimiLinearAttnResForCausalLM")
    assert (tmp_path / "modeling_kimi_linear_attnres.py").exists()
    assert (tmp_path / "configuration_kimi_linear_attnres.py").exists()

    ids = random_ids()
    with torch.no_grad():
        expected = model(ids).logits
        for loader in (KimiLinearAttnResForCausalLM, AutoModelForCausalLM):
            loaded = loader.from_pretrained(tmp_path).eval()
            assert isinstance(loaded, KimiLinearAttnResForCausalLM)
            assert torch.equal(loaded(ids).logits, expected)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), KimiLinearAttnResConfig)
    assert isinstance(AutoModel.from_pretrained(tmp_path), KimiLinearAttnResModel)


def test_bf16_checkpoint_keeps_dtype(tmp_path):
    """Loaded as bf16, a bf16 checkpoint keeps every tensor's value, and its dtype except where the installed Kimi
    Linear keeps a module in fp32 (`_keep_in_fp32_modules_strict`: the KDA `dt_bias`, the router's `gate.weight` and
    `e_score_correction_bias` from transformers 5.25), which the AttnRes model inherits as upstream declares it."""
    model = tiny_model("full", dtype=torch.bfloat16)
    model.save_pretrained(tmp_path)
    loaded = KimiLinearAttnResForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    kept_fp32 = set(getattr(loaded, "_keep_in_fp32_modules_strict", None) or ())
    assert kept_fp32 == set(getattr(KimiLinearForCausalLM, "_keep_in_fp32_modules_strict", None) or ())
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        want = torch.float32 if any(module in name for module in kept_fp32) else torch.bfloat16
        assert b.dtype == want and torch.equal(a.to(want), b), name


@pytest.mark.slow  # fresh Python processes: over 10 s (docs/TESTING.md)
def test_trust_remote_code_in_fresh_process(tmp_path):
    model = tiny_model("block", 2)
    model.save_pretrained(tmp_path)
    ids = random_ids()
    model.config.attn_res_backend = "torch"  # the folder's kernels carry no C++ CPU kernel: the lean path, bit for bit
    torch.save({"ids": ids, "logits": model(ids).logits.detach()}, tmp_path / "expected.pt")
    # A fresh interpreter that never imports attnres itself: transformers loads the folder's code
    script = textwrap.dedent(
        f"""
        import sys, torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(expected["ids"]).logits, expected["logits"], rtol=0, atol=0)
        print("REMOTE_CODE_OK")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "REMOTE_CODE_OK" in result.stdout, result.stderr[-3000:]
