"""The README's quickstart as a newcomer runs it. Its Python: both blocks, verbatim and in order, on a plain
checkpoint folder that has a tokenizer; the upcycled folder then holds the tokenizer too, and loads with
`trust_remote_code=True` in a fresh process where attnres cannot be imported, with the logits of the model saved.
Its command lines, run from the checkout: every folder they write is ignored by git."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from tests.families.tiny import source_model
from tests.helpers.remote_loading import load_in_clean_process, write_tokenizer
from tests.test_readme import README, REPO, block_commands, code_blocks, quickstart, run_snippet


@pytest.mark.slow  # two fresh interpreters: the snippet's, and the clean load's
def test_quickstart_python_blocks_run_as_written_and_the_folder_loads_without_attnres(tmp_path):
    from transformers import AutoModelForCausalLM

    import hf_attnres  # noqa: F401  (registers llama_attnres)
    from hf_attnres.utils.tokenizer_files import has_tokenizer

    blocks = code_blocks("python", quickstart())
    assert len(blocks) >= 2 and "trust_remote_code=True" in blocks[1]
    source_model("llama").save_pretrained(tmp_path / "my-llama")
    write_tokenizer(tmp_path / "my-llama")
    result = run_snippet("\n".join(blocks[:2]), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "my-llama-block"
    assert has_tokenizer(folder)
    saved = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert saved.config.model_type == "llama_attnres"
    ids = torch.randint(3, saved.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    loaded = load_in_clean_process(folder, ids, tmp_path / "clean", tmp_path / "hf_home", tokenizer=True)
    # the clean process runs one thread and its copy of the kernels mixes as backend "torch" does (no C++ CPU
    # kernel): the same reduction order here gives the same bits
    saved.config.attn_res_backend = "torch"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            assert torch.equal(loaded["logits"], saved(ids).logits)
    finally:
        torch.set_num_threads(threads)
    assert loaded["tokens"] == [5, 7, 9]  # write_tokenizer's words w5 w7 w9, through the folder's own tokenizer


def quickstart_paths() -> set[str]:
    """The top-level folder of every local path the quickstart's command lines name (Hub ids after --repo-id and
    --base-model aside), and compare's default report folder, which its report line names."""
    from hf_attnres.evaluation.args import CompareArgs

    commands = block_commands(code_blocks("bash", quickstart())[0])
    paths = {CompareArgs.output_dir.parts[0]}
    for command in commands:
        tokens = command.split()
        for before, token in zip(["", *tokens], tokens):
            if re.fullmatch(r"[\w.-]+/[\w./-]*", token) and before not in ("--repo-id", "--base-model"):
                paths.add(token.split("/")[0])
    return paths


def test_what_the_quickstart_writes_in_the_checkout_is_ignored_by_git():
    """Run from the checkout's root, as written, the quickstart leaves `git status` clean: each folder it names is
    ignored (.gitignore), the model folders, the corpus, the fine-tunes and compare's report alike."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    paths = quickstart_paths()
    assert {"smollm2", "smollm2-block", "data", "runs", "outputs"} <= paths, paths
    result = subprocess.run(["git", "check-ignore", "--no-index", *(f"{path}/" for path in sorted(paths))], cwd=REPO,
                            capture_output=True, text=True)
    ignored = {line.rstrip("/") for line in result.stdout.split()}
    assert ignored == paths, f"not ignored: {sorted(paths - ignored)}"


def test_the_install_torch_line_is_the_test_commands_cpu_install():
    """The README's first install line gets what `scripts/run_tests.sh` installs with TORCH_INDEX_URL set to the CPU
    index its comment names: the same torch release from PyTorch's CPU index (plain PyPI's torch is the CUDA build)."""
    install = README[README.index("## Install"):README.index("\n## ", README.index("## Install") + 1)]
    line = next(c for c in block_commands(code_blocks("bash", install)[0]) if c.startswith("pip install torch"))
    script = (REPO / "scripts" / "run_tests.sh").read_text()
    version = re.search(r'"torch==([0-9.]+)" --index-url "\$TORCH_INDEX_URL"', script).group(1)
    cpu_index = re.search(r"TORCH_INDEX_URL set \(e\.g\. (\S+) for the CPU build\)", script).group(1)
    assert line.split() == ["pip", "install", f"torch=={version}", "--index-url", cpu_index], line
