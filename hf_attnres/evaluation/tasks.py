"""Render task_templates/ (lm-eval task YAMLs, package data) into <eval-data>/tasks/, the folder lm-eval loads.

lm-eval resolves `include:` and data files by path, so the templates name two placeholders filled in here:
${lm_eval_tasks} (the installed lm-eval's own task folder, whose official YAMLs ours include) and ${data} (the
prepared data). A template whose file name holds SUBJECT is written once per subject of its benchmark. The rendered
folder is a plain lm-eval include path: `lm_eval --include_path data/eval/tasks --tasks attnres_mmlu` works too.
`compare` never reads that folder: it renders its own copy (`private_tasks`), as a data folder must not bring code.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from string import Template

from ..folders.atomic_io import move_into_place, temporary_folder

# Package data beside this module (pyproject.toml's package-data ships it in the wheel)
TEMPLATES = Path(__file__).resolve().parent / "task_templates"
TASKS_DIR = "tasks"
SUBJECT = "SUBJECT"  # in a template's file name: one copy per subject (${subject} inside)

# Task name -> (benchmark, generates text). Generation is slow and, for HumanEval, runs model-written code.
TASKS = {
    "attnres_mmlu": ("mmlu", False), "attnres_mmlu_cloze": ("mmlu", False), "attnres_mmlu_bpb": ("mmlu", False),
    "attnres_triviaqa": ("triviaqa", True), "attnres_triviaqa_bpb": ("triviaqa", False),
    "attnres_minerva_math": ("minerva_math", True), "attnres_minerva_math_bpb": ("minerva_math", False),
    "attnres_humaneval": ("humaneval", True), "attnres_humaneval_bpb": ("humaneval", False),
    "attnres_gpqa": ("gpqa", False), "attnres_gpqa_bpb": ("gpqa", False),
}
CODE_TASKS = ("attnres_humaneval",)
# Minerva math's subjects: lm-eval's file name -> the dataset config name (EleutherAI/hendrycks_math) and the official
# test count (data.py checks the prepared rows against it)
MATH_SUBJECTS = {
    "algebra": ("algebra", 1187), "counting_and_prob": ("counting_and_probability", 474),
    "geometry": ("geometry", 479), "intermediate_algebra": ("intermediate_algebra", 903),
    "num_theory": ("number_theory", 540), "prealgebra": ("prealgebra", 871), "precalc": ("precalculus", 546),
}


def lm_eval_tasks_dir() -> Path:
    import lm_eval

    return Path(lm_eval.__file__).resolve().parent / "tasks"


def subjects(benchmark: str, data_dir: Path) -> list[dict]:
    """Substitutions of each subject of a per-subject benchmark (MMLU: the prepared subject folders). A folder name
    goes into a YAML file's text and name, so only a plain name is a subject (a name holding a newline and a
    `!function` line would add code of its choosing to the task)."""
    if benchmark == "mmlu":
        names = sorted(p.name for p in (data_dir / "mmlu").iterdir() if p.is_dir())
        for name in names:
            if not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise ValueError(f"{data_dir / 'mmlu' / name!r}: not an MMLU subject (letters, digits and _ only); "
                                 "remove it or rerun prepare-eval-data")
        return [dict(subject=name) for name in names]
    if benchmark == "minerva_math":
        return [dict(subject=lm_name, dataset_name=ds) for lm_name, (ds, _) in MATH_SUBJECTS.items()]
    raise ValueError(f"{benchmark} has no subjects")


def template_files(templates: Path) -> list[Path]:
    """The templates under `templates`; a missing or empty folder (an install without the package data) is an error,
    never an empty task folder that leaves every task unknown to lm-eval."""
    files = sorted(p for p in Path(templates).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    if not files:
        raise FileNotFoundError(f"no lm-eval task templates in {templates} (a broken attnres install: the wheel ships "
                                "them as package data; reinstall attnres)")
    return files


def render_tasks(data_dir: Path, benchmarks: list[str], templates: Path = TEMPLATES) -> Path:
    """Write <data_dir>/tasks/<benchmark>/*.yaml for `benchmarks` (replacing the folder atomically); returns it."""
    files = template_files(templates)
    data_dir = Path(data_dir).resolve()
    out = data_dir / TASKS_DIR
    with temporary_folder(out) as tmp:
        _render(files, templates, data_dir, tmp, benchmarks)
        move_into_place(tmp, out, replace=True)  # tasks/ is always rendered anew from the templates
    return out


def _render(files: list[Path], templates: Path, data_dir: Path, tmp: Path, benchmarks: list[str]) -> None:
    common = dict(data=str(data_dir), lm_eval_tasks=str(lm_eval_tasks_dir()))
    for template in files:
        rel = template.relative_to(templates)
        if len(rel.parts) > 1 and rel.parts[0] not in benchmarks:
            continue  # a benchmark whose data is not prepared: its tasks stay unknown to lm-eval
        text = Template(template.read_text())
        variants = subjects(rel.parts[0], data_dir) if SUBJECT in template.name else [{}]
        for values in variants:
            target = tmp / str(rel).replace(SUBJECT, values.get("subject", SUBJECT))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.safe_substitute(common, **values))


def rendered_benchmarks(prepared: dict) -> list[str]:
    """The benchmarks prepare-eval-data renders tasks for: prepared now, or an earlier copy kept."""
    return [name for name, status in prepared.items() if isinstance(status, dict) and ("rows" in status or
                                                                                      "kept" in status)]


_PRIVATE_ROOT: dict[int, Path] = {}  # pid -> this process's folder of rendered task folders


def private_root() -> Path:
    """A folder only this process writes (mkdtemp: the user's, mode 0700), removed when the process exits."""
    root = _PRIVATE_ROOT.get(os.getpid())
    if root is None or not root.is_dir():
        root = _PRIVATE_ROOT[os.getpid()] = Path(tempfile.mkdtemp(prefix="attnres-tasks-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def private_tasks(data_dir: Path, benchmarks: list[str], templates: Path = TEMPLATES) -> Path:
    """The task folder `compare` hands to lm-eval: the package's templates rendered for `data_dir` into a folder of
    this process's own (`private_root`), never <data_dir>/tasks. lm-eval resolves `!function
    hf_attnres.evaluation.bpb.f`
    first as the file hf_attnres/evaluation/bpb.py beside the YAML, so YAMLs inside a data folder would run a module
    planted there (or whatever an edited YAML names); a data folder brings data only. An identical rendering reuses
    its folder, so lm-eval's task index of it (seconds) is built once per process."""
    files = template_files(templates)
    data_dir = Path(data_dir).resolve()
    root = private_root()
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".render-"))
    try:
        _render(files, templates, data_dir, staging, benchmarks)
        folder = root / _digest(staging)
        if not folder.exists():
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
