"""Shared helpers of the toolchain tests (no tests here): a tiny model folder as train.py's final/ writes it (weights,
config, code files, tokenizer), and 2-process launches of example scripts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import hf_attnres  # noqa: F401  registers the Auto classes and writes the code files with save_pretrained
from hf_attnres import KimiLinearAttnResForCausalLM
from hf_attnres.training.corpora import train_bpe
from hf_attnres.utils.tiny import tiny_config

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["the river runs under the stone bridge", "a queen sees the light of the house",
         "the king walks over the dark tree", "light and stone and the river of the house"]
# accelerate's MULTI_GPU launcher starts 2 processes; the scripts' Accelerator(cpu=True) makes them gloo DDP
ACCELERATE_2 = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]


def tiny_tokenizer():
    return train_bpe(TEXTS * 10, 300)


def tiny_folder(path: Path, mode: str = "block", num_layers: int = 3, seed: int = 0) -> Path:
    """A random tiny model + tokenizer saved like train.py's final/ (MLA layers only: fast on CPU)."""
    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    config = tiny_config(mode, 2, num_layers, vocab_size=len(tokenizer), layer_types=["full_attention"] * num_layers,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, family="kimi_linear")
    model = KimiLinearAttnResForCausalLM(config)
    with torch.no_grad():  # move the pseudo-queries off zero: a uniform mix hides wiring bugs
        for name, param in model.named_parameters():
            if name.endswith("_res_proj.weight"):
                param.normal_(0, 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_family_folder(path: Path, family: str) -> Path:
    """A tiny random model of a family (Llama, Mistral, ...: tests/families/tiny.py) upcycled to Block AttnRes, its
    pseudo-queries moved off zero, saved with tiny_folder's tokenizer."""
    from hf_attnres import upcycle
    from tests.families.tiny import source_model

    tokenizer = tiny_tokenizer()
    model = upcycle(source_model(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                 bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id), "block", 2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("_res_proj.weight"):
                param.normal_(0, 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def launch(command: list, timeout: int = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               DS_ACCELERATOR="cpu", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-5000:])
    return result


def write_chat_jsonl(path: Path, count: int = 60, seed: int = 0) -> Path:
    """Instruction data in both accepted formats: chat records (`messages`) and prompt/completion records."""
    import json
    import random

    rng = random.Random(seed)
    words = " ".join(TEXTS).split()
    lines = []
    for i in range(count):
        prompt, answer = " ".join(rng.choices(words, k=6)), " ".join(rng.choices(words, k=8))
        record = ({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}
                  if i % 2 else {"prompt": prompt, "completion": answer})
        lines.append(json.dumps(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare_chat(jsonl: Path, tokenizer_dir: Path, out: Path, seq_len: int = 32) -> Path:
    from hf_attnres.cli.prepare_data import main as prepare

    prepare(["--chat", str(jsonl), "--tokenizer", str(tokenizer_dir), "--seq-len",
                                      str(seq_len), "--validation-fraction", "0.2", "--output-dir", str(out)])
    return out


def finetune_args(data: Path, init_from: Path, out: Path, **flags) -> list[str]:
    from tests.helpers.train_fixtures import train_args

    options = dict(model_size=None, init_from=init_from, max_steps=4, micro_batch_size=2, warmup_steps=1, lr=1e-3,
                   save_every=2, eval_every=2, diagnostics_every=2)
    return train_args(data, out, **{**options, **flags})
