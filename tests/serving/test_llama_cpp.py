"""llama.cpp end to end on CPU: train a K3-architecture Block AttnRes model briefly (`--model-size k3-small`, GPT-2
BPE), set its pseudo-queries to random ones (8 steps from zero queries leave the depth mix nearly uniform, which a
runtime ignoring AttnRes would also reproduce: the negative control shows a standard residual over the same weights
fails the tolerance), `attnres export --to k3`, llama.cpp's OWN converter (`convert_hf_to_gguf.py`) to f32 / f16 /
q8_0 GGUF, load each with `llama_cpp`, compare next-token logits with ours, and greedy generation at f32.

llama.cpp comes from `scripts/setup_llama_cpp.sh` (run by scripts/run_tests.sh; the build is cached). Without it this
test FAILS: it is the check that the export is what a runtime reads, and must not pass by skipping. llama.cpp runs in
a child process (tests/helpers/llama_cpp_runner.py): an abort inside it fails one test with its assert line.
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

from hf_attnres import KimiLinearAttnResForCausalLM
from tests.helpers.llama_cpp_runner import LlamaCppCrash, run_llama_cpp
from tests.helpers.llama_cpp_runner import cache_dir as llama_cpp_cache_dir

PROMPTS = ["the king walks over the river", "a queen sees the light of the", "stone and tree and the dark house",
           "the river runs under"]
# max |llama.cpp - ours| / max |ours| over all positions of all prompts (measured: docs/RESULTS.md "Serving")
# trains, exports and converts a model, then runs llama.cpp in child processes: minutes
pytestmark = pytest.mark.slow
REL_TOLERANCE = {"f32": 1e-2, "f16": 1e-2, "q8_0": 3e-2}
GREEDY_TOKENS = 20
QUERY_SCALE = 1.0  # random pseudo-queries: the depth mix is far from uniform (the negative control measures it)


@pytest.fixture(scope="module")
def llama_cpp_dir() -> Path:
    """The cached build for this machine's flags: llama_cpp must be importable and the converter present."""
    cache = llama_cpp_cache_dir()
    probe = subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"llama_cpp is not installed: run scripts/setup_llama_cpp.sh --install (builds llama-cpp-python "
                    f"once, cached in {cache})")
    if not (cache / "llama.cpp" / "convert_hf_to_gguf.py").is_file():
        pytest.fail(f"{cache}: llama.cpp's converter is missing: run scripts/setup_llama_cpp.sh")
    return cache


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A k3-small model trained for a few steps on GPT-2 BPE data, its pseudo-queries made random, exported --to
    k3."""
    from transformers import AutoTokenizer

    from hf_attnres.cli.export import main as export
    from hf_attnres.cli.prepare_data import main as prepare
    from hf_attnres.cli.train import main as train
    from tests.helpers.train_fixtures import train_args, write_documents

    root = tmp_path_factory.mktemp("llama_cpp")
    prepare(["--files", *map(str, write_documents(root / "text", count=4)), "--seq-len", "32",
             "--validation-fraction", "0.2", "--output-dir", str(root / "data")])  # default tokenizer: GPT-2 BPE
    train(train_args(root / "data", root / "run", model_size="k3-small", max_steps=8, micro_batch_size=4, lr=1e-2,
                     eval_every=8, save_every=8, diagnostics_every=8))
    from tests.helpers.model_factory import perturb_attn_res

    trained = KimiLinearAttnResForCausalLM.from_pretrained(root / "run" / "final", dtype=torch.float32)
    perturb_attn_res(trained, scale=QUERY_SCALE).save_pretrained(root / "queries")
    AutoTokenizer.from_pretrained(root / "run" / "final").save_pretrained(root / "queries")
    export([str(root / "queries"), str(root / "k3"), "--to", "k3", "--no-progress"])
    return root / "k3"


def gguf(llama_cpp_dir: Path, exported: Path, outtype: str) -> Path:
    """llama.cpp's own converter on our export, with its own gguf-py."""
    converter = llama_cpp_dir / "llama.cpp" / "convert_hf_to_gguf.py"
    out = exported.parent / f"model-{outtype}.gguf"
    if not out.exists():
        env = dict(os.environ, PYTHONPATH=str(converter.parent / "gguf-py"), NO_LOCAL_GGUF="")
        command = [sys.executable, str(converter), str(exported), "--outtype", outtype, "--outfile", str(out)]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"convert_hf_to_gguf.py --outtype {outtype} failed:\n{run.stderr[-4000:]}"
    return out


def llama(llama_cpp_dir: Path, exported: Path, outtype: str, ids: list[list[int]], greedy_tokens: int = 0):
    """llama.cpp's tokenization, logits and greedy tokens, from a child process (an abort there fails this test
    with llama.cpp's assert line, and the suite goes on)."""
    path = gguf(llama_cpp_dir, exported, outtype)
    try:
        return run_llama_cpp(path, PROMPTS[: len(ids)], ids, greedy_tokens, exported.parent / f"llama-{outtype}")
    except LlamaCppCrash as crash:
        pytest.fail(f"{outtype} GGUF: {crash}")


@pytest.fixture(scope="module")
def ours(exported):
    from transformers import AutoTokenizer

    return KimiLinearAttnResForCausalLM.from_pretrained(exported, dtype=torch.float32).eval(), \
        AutoTokenizer.from_pretrained(exported)


def our_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double().numpy()


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_llama_cpp_logits_match_ours(llama_cpp_dir, exported, ours, outtype):
    model, tokenizer = ours
    ids = [tokenizer(prompt)["input_ids"] for prompt in PROMPTS]
    theirs = llama(llama_cpp_dir, exported, outtype, ids)
    abs_err, scale, agree, total = 0.0, 0.0, 0, 0
    for i, prompt_ids in enumerate(ids):
        # llama.cpp recognised GPT-2's pre-tokenizer: it tokenizes exactly as the HF tokenizer does
        assert theirs[f"tokens_{i}"].tolist() == prompt_ids
        logits, mine = theirs[f"logits_{i}"], our_logits(model, prompt_ids)
        abs_err, scale = max(abs_err, np.abs(logits - mine).max()), max(scale, np.abs(mine).max())
        agree, total = agree + int((logits.argmax(-1) == mine.argmax(-1)).sum()), total + len(prompt_ids)
    rel = abs_err / scale
    print(f"\nllama.cpp {outtype}: max abs error {abs_err:.3e}, max rel error {rel:.3e}, top-1 {agree}/{total}")
    (exported.parent / f"errors-{outtype}.json").write_text(json.dumps(dict(abs=abs_err, rel=rel, top1=agree / total)))
    assert rel < REL_TOLERANCE[outtype], f"{outtype}: max rel error {rel:.3e} >= {REL_TOLERANCE[outtype]}"
    if outtype == "f32":
        assert agree == total


def test_llama_cpp_greedy_generation_is_ours_at_f32(llama_cpp_dir, exported, ours):
    model, tokenizer = ours
    ids = [tokenizer(prompt)["input_ids"] for prompt in PROMPTS[:2]]
    theirs = llama(llama_cpp_dir, exported, "f32", ids, greedy_tokens=GREEDY_TOKENS)
    for i, prompt_ids in enumerate(ids):
        with torch.no_grad():
            generated = model.generate(torch.tensor([prompt_ids]), max_new_tokens=GREEDY_TOKENS,
                                       min_new_tokens=GREEDY_TOKENS, do_sample=False)[0, len(prompt_ids):].tolist()
        assert theirs[f"greedy_{i}"].tolist() == generated, \
            f"{PROMPTS[i]!r}: llama.cpp {theirs[f'greedy_{i}'].tolist()} != ours {generated}"


def standard_residual_twin(model):
    """The same weights under a standard residual (every AttnRes parameter unused): what a runtime that ignored
    AttnRes would compute."""
    import copy

    config = copy.deepcopy(model.config)
    config.attn_res_mode = "standard"
    twin = KimiLinearAttnResForCausalLM(config).eval()
    missing, _ = twin.load_state_dict(model.state_dict(), strict=False)
    assert not missing, missing  # every weight a standard model has comes from the AttnRes model
    return twin


def test_negative_control_a_standard_residual_fails_the_tolerance(llama_cpp_dir, exported, ours):
    """The tolerance above can tell AttnRes from a plain residual: llama.cpp's f32 logits against a standard-residual
    run of the same weights miss it, by a wide margin, where they match our AttnRes logits."""
    model, tokenizer = ours
    twin = standard_residual_twin(model)
    ids = [tokenizer(prompt)["input_ids"] for prompt in PROMPTS]
    theirs = llama(llama_cpp_dir, exported, "f32", ids)
    errors = {"attnres": (0.0, 0.0), "standard": (0.0, 0.0)}
    for i, prompt_ids in enumerate(ids):
        for name, reference in (("attnres", model), ("standard", twin)):
            mine = our_logits(reference, prompt_ids)
            err, scale = errors[name]
            errors[name] = (max(err, np.abs(theirs[f"logits_{i}"] - mine).max()), max(scale, np.abs(mine).max()))
    rel = {name: err / scale for name, (err, scale) in errors.items()}
    print(f"\nllama.cpp f32 vs ours: AttnRes {rel['attnres']:.3e}, standard residual {rel['standard']:.3e}")
    assert rel["attnres"] < REL_TOLERANCE["f32"]
    assert rel["standard"] > 3 * max(REL_TOLERANCE.values()), rel  # the control fails every tolerance, clearly
