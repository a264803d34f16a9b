"""llama.cpp end to end on CPU: train a K3-architecture Block AttnRes model briefly (`--model-size k3-small`, GPT-2
BPE), `attnres export --to k3`, llama.cpp's OWN converter (`convert_hf_to_gguf.py`) to f32 / f16 / q8_0 GGUF, load
each with `llama_cpp`, compare next-token logits with ours, and greedy generation at f32.

llama.cpp comes from `scripts/setup_llama_cpp.sh` (run by scripts/run_tests.sh; the build is cached). Without it this
test FAILS: it is the check that the export is what a runtime reads, and must not pass by skipping.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnres import KimiLinearAttnResForCausalLM

VERSION = "0.3.36"
CACHE = Path(os.environ.get("ATTNRES_LLAMA_CPP_CACHE", Path.home() / ".cache" / "attnres" / "llama-cpp")) / VERSION
CONVERTER = CACHE / "llama.cpp" / "convert_hf_to_gguf.py"
PROMPTS = ["the king walks over the river", "a queen sees the light of the", "stone and tree and the dark house",
           "the river runs under"]
# max |llama.cpp - ours| / max |ours| over all positions of all prompts (measured: RESULTS.md "Serving")
REL_TOLERANCE = {"f32": 1e-2, "f16": 1e-2, "q8_0": 3e-2}
GREEDY_TOKENS = 20


def llama_cpp():
    try:
        import llama_cpp as module
    except ImportError:
        pytest.fail(f"llama_cpp is not installed: run scripts/setup_llama_cpp.sh --install (builds llama-cpp-python "
                    f"{VERSION} once, cached under {CACHE.parent})")
    if not CONVERTER.is_file():
        pytest.fail(f"{CONVERTER}: llama.cpp's converter is missing: run scripts/setup_llama_cpp.sh")
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A k3-small model trained for a few steps on GPT-2 BPE data, exported --to k3."""
    from attnres.cli.export import main as export
    from attnres.cli.prepare_data import main as prepare
    from attnres.cli.train import main as train
    from tests.helpers.train_fixtures import train_args, write_documents

    root = tmp_path_factory.mktemp("llama_cpp")
    prepare(["--files", *map(str, write_documents(root / "text", count=4)), "--seq-len", "32",
             "--validation-fraction", "0.2", "--output-dir", str(root / "data")])  # default tokenizer: GPT-2 BPE
    train(train_args(root / "data", root / "run", model_size="k3-small", max_steps=8, micro_batch_size=4, lr=1e-2,
                     eval_every=8, save_every=8, diagnostics_every=8))
    export([str(root / "run" / "final"), str(root / "k3"), "--to", "k3", "--no-progress"])
    return root / "k3"


def gguf(exported: Path, outtype: str) -> Path:
    """llama.cpp's own converter on our export, with its own gguf-py."""
    out = exported.parent / f"model-{outtype}.gguf"
    if not out.exists():
        env = dict(os.environ, PYTHONPATH=str(CONVERTER.parent / "gguf-py"), NO_LOCAL_GGUF="")
        command = [sys.executable, str(CONVERTER), str(exported), "--outtype", outtype, "--outfile", str(out)]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"convert_hf_to_gguf.py --outtype {outtype} failed:\n{run.stderr[-4000:]}"
    return out


def load(module, path: Path):
    return module.Llama(model_path=str(path), logits_all=True, n_ctx=128, n_batch=128, n_threads=1, seed=0,
                        verbose=False)


def llama_logits(llm, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float64)


@pytest.fixture(scope="module")
def ours(exported):
    from transformers import AutoTokenizer

    return KimiLinearAttnResForCausalLM.from_pretrained(exported, dtype=torch.float32).eval(), \
        AutoTokenizer.from_pretrained(exported)


def our_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double().numpy()


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_llama_cpp_logits_match_ours(exported, ours, outtype):
    module = llama_cpp()
    model, tokenizer = ours
    llm = load(module, gguf(exported, outtype))
    abs_err, scale, agree, total = 0.0, 0.0, 0, 0
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        # llama.cpp recognised GPT-2's pre-tokenizer: it tokenizes exactly as the HF tokenizer does
        assert llm.tokenize(prompt.encode(), add_bos=False, special=False) == ids
        theirs, mine = llama_logits(llm, ids), our_logits(model, ids)
        abs_err, scale = max(abs_err, np.abs(theirs - mine).max()), max(scale, np.abs(mine).max())
        agree, total = agree + int((theirs.argmax(-1) == mine.argmax(-1)).sum()), total + len(ids)
    rel = abs_err / scale
    print(f"\nllama.cpp {outtype}: max abs error {abs_err:.3e}, max rel error {rel:.3e}, top-1 {agree}/{total}")
    (exported.parent / f"errors-{outtype}.json").write_text(json.dumps(dict(abs=abs_err, rel=rel, top1=agree / total)))
    assert rel < REL_TOLERANCE[outtype], f"{outtype}: max rel error {rel:.3e} >= {REL_TOLERANCE[outtype]}"
    if outtype == "f32":
        assert agree == total


def test_llama_cpp_greedy_generation_is_ours_at_f32(exported, ours):
    module = llama_cpp()
    model, tokenizer = ours
    llm = load(module, gguf(exported, "f32"))
    for prompt in PROMPTS[:2]:
        ids = tokenizer(prompt)["input_ids"]
        with torch.no_grad():
            generated = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS,
                                       do_sample=False)[0, len(ids):].tolist()
        llm.reset()
        llm.eval(ids)
        theirs = []
        for _ in range(GREEDY_TOKENS):
            theirs.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([theirs[-1]])
        assert theirs == generated, f"{prompt!r}: llama.cpp {theirs} != ours {generated}"
