"""The Hugging Face toolchain on our model, with the real libraries (no mocks), one process: the README's Trainer,
TRL and PEFT examples (run as files), PEFT LoRA on the pseudo-queries, batched `pipeline("text-generation")`,
`generate` with sampling and left padding, AutoTokenizer without a prompt, and `device_map="auto"` with CPU + disk
offload. The 2-process runs are in test_toolchain_distributed.py."""
from __future__ import annotations

import json
import runpy
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_attnres import KimiLinearAttnResForCausalLM
from tests.families.tiny import FAMILIES
from tests.helpers.collection import missing_tests
from tests.helpers.toolchain_fixtures import REPO, TEXTS, tiny_family_folder, tiny_folder
from tests.test_docs_links import links


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_folder(tmp_path_factory.mktemp("toolchain") / "model", "block")


def run_example(name, *argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [name, *map(str, argv)])
    runpy.run_path(str(REPO / "examples" / name), run_name="__main__")


def test_trainer_example_with_gradient_checkpointing(folder, tmp_path, monkeypatch):
    run_example("finetune_trainer.py", folder, tmp_path / "out", "--steps", "2", "--gradient-checkpointing",
                monkeypatch=monkeypatch)
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert not torch.equal(tuned.lm_head.weight, KimiLinearAttnResForCausalLM.from_pretrained(folder).lm_head.weight)


def test_trl_sft_example_trains_assistant_tokens(folder, tmp_path, monkeypatch):
    run_example("finetune_trl_sft.py", folder, tmp_path / "out", "--steps", "2", monkeypatch=monkeypatch)
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert not torch.equal(tuned.lm_head.weight, KimiLinearAttnResForCausalLM.from_pretrained(folder).lm_head.weight)


def test_peft_lora_example_trains_every_target_and_merges(folder, tmp_path, monkeypatch):
    # the example itself asserts: reloaded adapter + merge give the trained logits
    run_example("finetune_peft_lora.py", folder, tmp_path / "out", "--steps", "3", monkeypatch=monkeypatch)
    adapter = load_file(str(tmp_path / "out" / "adapter" / "adapter_model.safetensors"))
    lora_b = {name: t for name, t in adapter.items() if "lora_B" in name}
    for part in ("mlp_res_proj", "output_attn_res_proj", "q_proj", "experts", "shared_experts.down_proj"):
        trained = [name for name, t in lora_b.items() if part in name and t.any()]  # B starts at zero
        assert trained, f"LoRA on {part} did not train"
    merged = load_file(str(tmp_path / "out" / "merged" / "model.safetensors"))
    base = load_file(str(folder / "model.safetensors"))
    assert not torch.equal(merged["model.layers.1.mlp_res_proj.weight"], base["model.layers.1.mlp_res_proj.weight"])


@pytest.fixture(scope="module", params=FAMILIES)
def family_folder(request, tmp_path_factory):
    """An upcycled tiny model of each other family of the registry (tests/families/tiny.py)."""
    return tiny_family_folder(tmp_path_factory.mktemp(request.param) / "model", request.param)


def changed(out, folder) -> bool:
    """Whether the tuned model in `out` (a family's AttnRes model, by the Auto classes) left `folder`'s weights."""
    tuned = AutoModelForCausalLM.from_pretrained(out)
    start = AutoModelForCausalLM.from_pretrained(folder)
    assert type(tuned) is type(start) and tuned.config.attn_res_mode == "block"
    return not torch.equal(tuned.model.layers[0].mlp.down_proj.weight, start.model.layers[0].mlp.down_proj.weight)


def test_trainer_example_every_family(family_folder, tmp_path, monkeypatch):
    run_example("finetune_trainer.py", family_folder, tmp_path / "out", "--steps", "1", monkeypatch=monkeypatch)
    assert changed(tmp_path / "out", family_folder)


def test_trl_sft_example_every_family(family_folder, tmp_path, monkeypatch):
    run_example("finetune_trl_sft.py", family_folder, tmp_path / "out", "--steps", "1", monkeypatch=monkeypatch)
    assert changed(tmp_path / "out", family_folder)


def test_peft_lora_example_every_family(family_folder, tmp_path, monkeypatch):
    # the example itself asserts: reloaded adapter + merge give the trained logits
    run_example("finetune_peft_lora.py", family_folder, tmp_path / "out", "--steps", "2", monkeypatch=monkeypatch)
    adapter = load_file(str(tmp_path / "out" / "adapter" / "adapter_model.safetensors"))
    fused = json.loads((family_folder / "config.json").read_text())["model_type"] == "phi3_attnres"
    attention = ("qkv_proj", "gate_up_proj") if fused else ("q_proj", "k_proj")  # Phi-3's fused projections
    for part in ("self_attention_res_proj", "mlp_res_proj", "output_attn_res_proj", *attention, "down_proj"):
        assert any(part in name and t.any() for name, t in adapter.items() if "lora_B" in name), part
    merged = load_file(str(tmp_path / "out" / "merged" / "model.safetensors"))
    base = load_file(str(family_folder / "model.safetensors"))
    assert not torch.equal(merged["model.layers.1.mlp_res_proj.weight"], base["model.layers.1.mlp_res_proj.weight"])


@pytest.mark.parametrize("two_phase", [False, True])
def test_lora_on_pseudo_queries_is_not_a_silent_no_op(folder, two_phase):
    """An adapter on `*_res_proj` changes the mix (plain and two-phase inference path) and gets a gradient."""
    from peft import LoraConfig, get_peft_model

    base = KimiLinearAttnResForCausalLM.from_pretrained(folder, attn_res_two_phase=two_phase)
    ids = torch.tensor([[5, 9, 30, 41, 7, 12]])
    with torch.no_grad():
        before = base(input_ids=ids).logits
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["self_attention_res_proj", "mlp_res_proj"]))
    model(input_ids=ids, labels=ids).loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if "lora_B" in n}
    assert grads and all(g is not None for g in grads.values())
    assert grads["base_model.model.model.layers.1.mlp_res_proj.lora_B.default.weight"].any()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.3)
        adapted = model(input_ids=ids).logits
        assert not torch.allclose(adapted, before)
        merged = model.merge_and_unload()(input_ids=ids).logits
    torch.testing.assert_close(adapted, merged, rtol=1e-5, atol=1e-5)


def test_batched_pipeline_and_left_padded_sampling(folder):
    from transformers import pipeline

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    outputs = generator(TEXTS[:3], batch_size=3, max_new_tokens=4, do_sample=False)
    assert len(outputs) == 3 and all(out[0]["generated_text"].startswith(text) for out, text in zip(outputs, TEXTS))

    tokenizer.padding_side = "left"
    prompts = ["the river", "a queen sees the light of"]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    greedy = model.generate(**batch, max_new_tokens=4, do_sample=False)
    for row, prompt in enumerate(prompts):  # left padding changes nothing: each row as if alone
        alone = model.generate(**tokenizer(prompt, return_tensors="pt"), max_new_tokens=4, do_sample=False)
        assert torch.equal(greedy[row, -4:], alone[0, -4:])
    torch.manual_seed(0)
    sampled = model.generate(**batch, max_new_tokens=4, do_sample=True, top_k=20, temperature=0.9)
    assert sampled.shape == greedy.shape


def test_auto_tokenizer_loads_without_any_prompt(folder):
    code = ("import hf_attnres; from transformers import AutoTokenizer; "
            f"t = AutoTokenizer.from_pretrained({str(folder)!r});"
            "print('pad', t.pad_token == t.eos_token)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pad True" in result.stdout and "[y/N]" not in result.stdout + result.stderr


@pytest.mark.parametrize("two_phase", [False, True])
def test_device_map_auto_with_cpu_and_disk_offload_gives_the_same_logits(folder, tmp_path, two_phase):
    reference = KimiLinearAttnResForCausalLM.from_pretrained(folder).eval()
    offloaded = AutoModelForCausalLM.from_pretrained(folder, device_map="auto", max_memory={"cpu": "500KB"},
                                                     offload_folder=str(tmp_path / "offload"),
                                                     attn_res_two_phase=two_phase).eval()
    placed = offloaded.hf_device_map
    assert placed["model.layers.0"] == "cpu" and placed["model.layers.1"] == "disk", placed
    ids = torch.tensor([[5, 9, 30, 41, 7, 12]])
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        torch.testing.assert_close(offloaded(input_ids=ids).logits, expected, rtol=0 if not two_phase else 1e-5,
                                   atol=0 if not two_phase else 1e-5)  # two-phase: equal up to fp32 rounding


# each example -> the test that runs it (its pytest node id)
EXAMPLE_TESTS = {
    "finetune_accelerate.py": "tests/training/test_toolchain_distributed.py::test_examples_train_under_plain_ddp",
    "finetune_trainer.py": "tests/training/test_toolchain.py::test_trainer_example_with_gradient_checkpointing",
    "finetune_trl_sft.py": "tests/training/test_toolchain.py::test_trl_sft_example_trains_assistant_tokens",
    "finetune_peft_lora.py": "tests/training/test_toolchain.py::test_peft_lora_example_trains_every_target_and_merges",
}


def test_every_example_is_linked_from_the_readme_and_run_by_a_test():
    """Each file of examples/ is a link of the README and has a test that pytest collects (a renamed or deleted
    test, or a new example without one, fails here)."""
    examples = sorted(path.name for path in (REPO / "examples").glob("*.py"))
    assert sorted(EXAMPLE_TESTS) == examples
    linked = set(links(REPO / "README.md"))
    assert [name for name in examples if f"examples/{name}" not in linked] == []
    assert missing_tests(EXAMPLE_TESTS.values()) == []
