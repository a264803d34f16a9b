"""The pipeline trainers' model flags: the tiny random model is of --family (Llama unless named), and a --model folder
decides the model, so the tiny model's flags beside it are refused."""
from __future__ import annotations

import pytest

from hf_attnres.pipeline.args import InterleavedArgs, PipelineArgs
from hf_attnres.pipeline.train import load_config


@pytest.mark.parametrize("args_class", [PipelineArgs, InterleavedArgs])
def test_the_tiny_model_is_llama_unless_a_family_is_named(args_class):
    assert load_config(args_class(), None).model_type == "llama_attnres"
    assert load_config(args_class(family="qwen3"), None).model_type == "qwen3_attnres"
    assert load_config(args_class(family="kimi_linear"), None).model_type == "kimi_linear_attnres"


def test_the_signature_records_the_family():
    """A resume into a run of another family is another run."""
    args = InterleavedArgs()
    llama = args.signature(load_config(args, None), 2)
    qwen3 = InterleavedArgs(family="qwen3")
    assert llama["family"] == "llama_attnres" and qwen3.signature(load_config(qwen3, None), 2) != llama


def test_family_beside_model_is_refused(tmp_path):
    lines = [line for line in InterleavedArgs(model=tmp_path).conflicts({"family"}) if line]
    assert lines and "--family" in lines[0] and f"--model {tmp_path}" in lines[0]
