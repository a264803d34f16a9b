"""A saved folder knows the transformers range its code supports and refuses any other at load, in one line, before
any weight is read; `attnres repair-folder` regenerates an older folder's code, weights untouched, and it loads again
(hf_attnres/core/versions.py, hf_attnres/folders/remote_code.py, hf_attnres/folders/repair.py). The recorded folders
of an older version of the project (tests/data/unchanged) repair and give their recorded logits without the package.
Bad input to the command: tests/cli/test_repair_folder_bad_inputs.py."""
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
import torch
import transformers
from safetensors.torch import load_file

from hf_attnres.cli import command_main
from hf_attnres.core.versions import (
    TRANSFORMERS_MAX,
    TRANSFORMERS_MIN,
    TRANSFORMERS_RANGE,
    in_range,
    range_bounds,
    unsupported_transformers,
)
from hf_attnres.families.registry import SUPPORTED, family_classes
from hf_attnres.folders.remote_code import GENERATED_MARK, RANGE_CHECKED, auto_map, generated_files
from hf_attnres.folders.repair import plan_repair, repair_folder
from tests.data.unchanged.record import build, config_fields, unpack
from tests.helpers.remote_loading import block_packages, load_all_in_clean_process
from tests.helpers.tolerance import assert_logits_close

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "unchanged"
OLD_RANGE = ">=5.23,<5.24"  # what a generator of the 5.23-only days would have recorded
LLAMA = family_classes("llama")[1].__module__


def pad(release, size=3):
    return tuple(release) + (0,) * (size - len(release))


def test_the_range_is_pyprojects_requirement():
    requirement = next(r for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                       if re.match(r"transformers\b", r))
    low, high = range_bounds(requirement.removeprefix("transformers").split(";")[0])
    assert (pad(low), pad(high)) == (pad(TRANSFORMERS_MIN), pad(TRANSFORMERS_MAX)) == tuple(
        map(pad, range_bounds(TRANSFORMERS_RANGE))), requirement


def test_versions_compare_by_release_numbers():
    assert in_range("5.23.0") and in_range("5.23") and in_range("5.25.3") and in_range("5.23.0rc1")
    assert not in_range("5.26.0") and not in_range("5.26.0.dev0") and not in_range("5.22.9") and not in_range("6")
    assert unsupported_transformers(installed="5.25.0") is None
    line = unsupported_transformers(generated_with="5.23.0", installed="5.26.0")
    assert line == (f"this model folder's code supports transformers {TRANSFORMERS_RANGE} (generated with 5.23.0); "
                    "installed: 5.26.0. Repair the folder's code with `pip install hf-attnres && attnres repair-folder "
                    "FOLDER`, or install transformers<5.26")
    assert unsupported_transformers(installed="5.22.0").endswith("Install transformers>=5.23")
    for bad in (">=5.23", "<5.26,>=5.23,!=5.24", "5.23"):
        with pytest.raises(ValueError, match="written >=MIN,<MAX"):
            range_bounds(bad)


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_every_generated_file_records_the_range_and_the_generating_transformers(family):
    module = family_classes(family)[1].__module__
    files = generated_files(module)
    recorded = f"Supports transformers {TRANSFORMERS_RANGE}; generated with transformers {transformers.__version__}."
    for name, text in files.items():
        assert text.startswith(GENERATED_MARK) and recorded in ast.get_docstring(ast.parse(text)), name
    checks = [name for name, text in files.items() if f"\n{RANGE_CHECKED} = " in text]
    assert len(checks) == 1 and checks[0].startswith("configuration_"), checks  # what `AutoConfig` imports first
    assert f"TRANSFORMERS_RANGE = {TRANSFORMERS_RANGE!r}".replace("'", '"') in files[checks[0]]
    # the other auto_map file imports the checked constant from it at its top level: importing it checks
    for name in {f"{reference.rpartition('.')[0]}.py" for reference in auto_map(module).values()} - set(checks):
        assert f"from .{checks[0][:-3]} import {RANGE_CHECKED} as {RANGE_CHECKED}" in files[name], name


def weight_hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}


def set_recorded_range(folder: Path, text: str) -> None:
    """Rewrite the range a folder's generated files record, as an older generator would have written it."""
    for path in folder.glob("*.py"):
        path.write_text(path.read_text().replace(TRANSFORMERS_RANGE, text))


REFUSAL_CHILD = textwrap.dedent(
    """
    import json, sys, torch, transformers
    import transformers.modeling_utils as modeling_utils
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = json.loads(sys.argv[1])
    if spec["pretend"]:  # the version transformers reports, as a release outside the folder's range would
        transformers.__version__ = spec["pretend"]
    reads = []
    opened = modeling_utils.safe_open
    modeling_utils.safe_open = lambda *a, **k: (reads.append(a[0]), opened(*a, **k))[1]
    refusals = []
    for load in (AutoConfig.from_pretrained, AutoModelForCausalLM.from_pretrained):
        try:
            load(spec["old"], trust_remote_code=True)
            refusals.append(None)
        except Exception as error:
            refusals.append([type(error).__name__, str(error)])
    weights_before_repair = len(reads)
    model = AutoModelForCausalLM.from_pretrained(spec["repaired"], trust_remote_code=True).eval()
    imported = [m for m in sys.modules if m.split(".")[0] in ("hf_attnres", "triton")]
    with torch.no_grad():
        logits = model(torch.load(spec["ids"])).logits
    torch.save({"refusals": refusals, "weights_before_repair": weights_before_repair, "weights_after": len(reads),
                "imported": imported, "logits": logits, "version": transformers.__version__}, spec["out"])
    """
)


def run_without_package(child: str, spec: dict, work: Path) -> dict:
    """`child` in a fresh interpreter as a user without this package runs it (tests/helpers/remote_loading.py's
    setting: hf_attnres and triton blocked, offline, a Hugging Face home of its own)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "child.py").write_text(child)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_", "TRANSFORMERS_"))}
    env.update(PYTHONPATH=str(block_packages(work / "blocked")), HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    spec = {**spec, "out": str(work / "out.pt")}
    result = subprocess.run([sys.executable, str(work / "child.py"), json.dumps(spec)], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-4000:]
    return torch.load(work / "out.pt")


IS_525 = transformers.__version__.startswith("5.25.")


@pytest.mark.parametrize("pretend", [
    "5.24.0",  # any installed transformers: the child reports 5.24.0, outside the old folder's range
    pytest.param(None, marks=pytest.mark.skipif(not IS_525, reason="needs transformers 5.25 installed "
                                                "(/work/venv525; CI's version lane)")),
], ids=["reported-5.24", "installed-5.25"])
def test_a_folder_outside_its_range_refuses_in_one_line_and_loads_once_repaired(pretend, tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)
    model = build("llama", config_fields("llama", "block"))
    model.save_pretrained(tmp_path / "saved")
    old = shutil.copytree(tmp_path / "saved", tmp_path / "old")
    set_recorded_range(old, OLD_RANGE)
    repaired = shutil.copytree(old, tmp_path / "repaired")
    before = weight_hashes(repaired)
    assert plan_repair(repaired).needed
    assert command_main("repair-folder", [str(repaired)]) == 0
    assert weight_hashes(repaired) == before and not plan_repair(repaired).needed
    ids = torch.randint(3, 32, (2, 7), generator=torch.Generator().manual_seed(1))
    torch.save(ids, tmp_path / "ids.pt")
    result = run_without_package(REFUSAL_CHILD, dict(old=str(old), repaired=str(repaired), pretend=pretend,
                                                     ids=str(tmp_path / "ids.pt")), tmp_path / "run")
    installed = result["version"]
    line = (f"this model folder's code supports transformers {OLD_RANGE} (generated with {transformers.__version__}); "
            f"installed: {installed}. Repair the folder's code with `pip install hf-attnres && attnres repair-folder "
            f"FOLDER`, or install transformers<5.24")
    assert result["refusals"] == [["UnsupportedTransformersError", line]] * 2, result["refusals"]
    assert result["weights_before_repair"] == 0  # refused before any weight file was opened
    assert result["weights_after"] > 0 and result["imported"] == []  # the probe sees a load; the package stayed out
    model.config.attn_res_backend = "torch"  # the folder's copy takes the lean path on CPU, as backend "torch"
    with torch.no_grad():
        expected = model(ids).logits
    assert torch.equal(result["logits"], expected), (result["logits"] - expected).abs().max()


def test_the_recorded_folders_of_an_older_version_repair_and_give_their_logits_without_the_package(tmp_path,
                                                                                                    monkeypatch):
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)
    logits = load_file(DATA / "logits.safetensors")
    configs = json.loads((DATA / "configs.json").read_text())
    families = sorted(SUPPORTED)
    folders = []
    for family in families:
        folder = unpack(family, tmp_path / "folders" / family)
        old_code = {p.name: p.read_text() for p in folder.glob("*.py")}
        # generated before the rename (by `attnres.<core or folders>.remote_code`), with no range of their own
        assert all(re.match(rf"{GENERATED_MARK} \(attnres\.\w+\.remote_code\)", text) and RANGE_CHECKED not in text
                   for text in old_code.values()), family
        before, inode = weight_hashes(folder), (folder / "model.safetensors").stat().st_ino
        plan = repair_folder(folder)
        assert plan.needed and plan.family == family
        assert weight_hashes(folder) == before and (folder / "model.safetensors").stat().st_ino == inode
        code = generated_files(family_classes(family)[1].__module__, json.loads((folder / "config.json").read_text()))
        assert {p.name for p in folder.glob("*.py")} == set(code)
        assert all((folder / name).read_text() == text for name, text in code.items())
        assert "AutoModel" in json.loads((folder / "config.json").read_text())["auto_map"]
        folders.append(folder)
    results = load_all_in_clean_process(folders, logits["ids"], tmp_path / "run", tmp_path / "hf")
    # the recorded folders ran the fused C++ CPU kernel of their time; a repaired one runs the lean PyTorch path (the
    # installed package registers the C++ one): the same arithmetic reassociated, so equal to float32 rounding only
    for family, result in zip(families, results):
        config = family_classes(family)[0](**configs[f"{family}.block"])
        assert_logits_close(result["logits"], logits[f"{family}.block"], config, msg=family)


def test_repair_removes_only_generated_files_it_no_longer_writes_and_check_writes_nothing(tmp_path, capsys):
    folder = unpack("llama", tmp_path / "llama")
    stale = "# Generated by attnres (attnres.core.remote_code) from the package's modules, do not edit:\nX = 1\n"
    (folder / "attnres_core_7.py").write_text(stale)  # a split file of an older generator
    (folder / "my_helper.py").write_text("# my own code\n")  # the user's: never touched
    (folder / "notes").mkdir()
    (folder / "notes" / "a.txt").write_text("kept")
    snapshot = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert command_main("repair-folder", [str(folder), "--check"]) == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{folder} (llama family): needs repair: write ") and "remove attnres_core_7.py" in out
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == snapshot
    assert command_main("repair-folder", [str(folder)]) == 0
    assert "repaired" in capsys.readouterr().out
    assert not (folder / "attnres_core_7.py").exists()
    assert (folder / "my_helper.py").read_text() == "# my own code\n"
    assert (folder / "notes" / "a.txt").read_text() == "kept"
    for name in ("model.safetensors", "attnres_weights.json", "generation_config.json"):
        assert (folder / name).read_bytes() == snapshot[Path(name)], name
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no sibling or lock left
    assert command_main("repair-folder", [str(folder), "--check"]) == 0
    assert capsys.readouterr().out.strip() == f"{folder} (llama family): up to date, nothing to repair"


def test_help_explains_the_command(capsys):
    with pytest.raises(SystemExit) as stop:
        command_main("repair-folder", ["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "usage: attnres repair-folder" in out and "--check" in out and "weights untouched" in out
