"""The package works installed from its wheel, away from the checkout: the wheel is built, installed (no deps) into a
fresh virtual environment that sees the running interpreter's torch / transformers / lm-eval (tests/helpers/venv.py:
in a venv or the system Python alike) but not the checkout, and there the lm-eval task templates render (package
data), the console scripts run, and a tiny model saves, loads and generates. Everything lives under tmp_path; nothing
is written into the checkout."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.helpers.venv import build_wheel, make_venv, run

REPO = Path(__file__).resolve().parent.parent

# Run inside the venv, cwd outside the checkout: which attnres it imports, then the three things a user does first
IN_VENV = textwrap.dedent("""
    import sys
    from pathlib import Path

    import hf_attnres
    from hf_attnres.evaluation.tasks import render_tasks

    venv, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    assert Path(hf_attnres.__file__).resolve().is_relative_to(venv), f"not the installed copy: {hf_attnres.__file__}"

    # the lm-eval task YAMLs, rendered from the templates the wheel ships
    (work / "eval" / "mmlu" / "anatomy").mkdir(parents=True)
    tasks = render_tasks(work / "eval", ["mmlu", "gpqa", "humaneval", "triviaqa", "minerva_math"])
    names = sorted(p.relative_to(tasks).as_posix() for p in tasks.rglob("*.yaml"))
    for expected in ("mmlu/attnres_mmlu_anatomy.yaml", "gpqa/attnres_gpqa_bpb.yaml", "humaneval/attnres_humaneval.yaml",
                     "minerva_math/attnres_minerva_math_algebra.yaml", "triviaqa/attnres_triviaqa.yaml"):
        assert expected in names, (expected, names)
    assert "${data}" not in (tasks / "gpqa" / "attnres_gpqa_bpb.yaml").read_text()

    # a tiny model: save, load through the Auto classes, generate the same tokens
    import torch
    from transformers import AutoModelForCausalLM

    from hf_attnres import KimiLinearAttnResForCausalLM
    from hf_attnres.utils.tiny import tiny_config

    torch.manual_seed(0)
    model = KimiLinearAttnResForCausalLM(tiny_config("block", num_layers=2, layer_types=["full_attention"] * 2,
        family="kimi_linear")).eval()
    model.save_pretrained(work / "model")
    loaded = AutoModelForCausalLM.from_pretrained(work / "model").eval()
    prompt = torch.tensor([[1, 2, 3, 4]])
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, **kwargs), loaded.generate(prompt, **kwargs))
    print("ok", len(names), "task files")
""")


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_works(tmp_path):
    wheel = build_wheel(REPO, tmp_path)

    venv = tmp_path / "venv"
    python, bin_dir = make_venv(venv)
    # The running interpreter's pip (seen through the venv's .pth) installs into the venv; --ignore-installed: an
    # attnres the running interpreter has must not count as "already satisfied"
    run([str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", "--quiet", str(wheel)])

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    result = run([str(python), "-c", IN_VENV, str(venv), str(work)], cwd=work, env=env)
    assert result.stdout.splitlines()[-1].startswith("ok"), result.stdout

    # the console scripts the wheel installs
    assert "prepare-eval-data" in run([str(bin_dir / "attnres"), "--help"], cwd=work, env=env).stdout
    assert "--allow-code-execution" in run([str(bin_dir / "attnres"), "compare", "--help"], cwd=work, env=env).stdout
    assert "--gpqa-csv" in run([str(bin_dir / "attnres-prepare-eval-data"), "--help"], cwd=work, env=env).stdout
    plan = run([str(bin_dir / "attnres"), "plan-memory", "tiny", "--stages", "2", "--context", "64"], cwd=work, env=env)
    assert "param" in plan.stdout.lower(), plan.stdout
