"""Shared helpers of the evaluation tests (no tests here): a tiny corpus, two tiny matched models saved with its
tokenizer, and self-written benchmark items in each benchmark's official layout (no download, no real items)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from hf_attnres.evaluation.data import PREPARED_FILE, write_jsonl
from hf_attnres.evaluation.tasks import render_tasks
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.train_fixtures import prepare_tiny_dataset

MMLU_SUBJECTS = ("anatomy", "astronomy")  # two of the 57 are enough to exercise the per-subject group
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")
GPQA_HEADER = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def save_tiny_model(folder: Path, tokenizer, mode: str, seed: int = 0) -> Path:
    """A 2-layer MLA-only model (fast on CPU) with `tokenizer` beside it, as scripts/train.py's final/ looks."""
    from hf_attnres import KimiLinearAttnResForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(mode, block_size=1, num_layers=2, layer_types=["full_attention"] * 2,
                         vocab_size=len(tokenizer), bos_token_id=tokenizer.eos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id, family="kimi_linear")
    model = KimiLinearAttnResForCausalLM(config).eval()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def tiny_pair(root: Path) -> tuple[Path, Path, Path]:
    """(data folder, standard model folder, block model folder)."""
    from transformers import AutoTokenizer

    data = prepare_tiny_dataset(root, seq_len=32)
    tokenizer = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    return (data, save_tiny_model(root / "standard", tokenizer, "standard"),
            save_tiny_model(root / "block", tokenizer, "block", seed=1))


def gpqa_rows(n: int = 4) -> list[dict]:
    return [dict(zip(GPQA_HEADER, (f"What is {i} plus {i}?", str(2 * i), str(2 * i + 1), str(2 * i + 2), str(i))))
            for i in range(1, n + 1)]


def write_gpqa_csv(path: Path, rows: list[dict]) -> Path:
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*GPQA_HEADER, "Subdomain"])
        writer.writeheader()
        for row in rows:
            writer.writerow(dict(row, Subdomain="arithmetic"))
    return path


CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
            "Russia": "Moscow", "Egypt": "Cairo", "England": "London", "Greece": "Athens", "Portugal": "Lisbon",
            "Austria": "Vienna", "Ireland": "Dublin", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
            "Denmark": "Copenhagen", "Poland": "Warsaw", "Hungary": "Budapest", "China": "Beijing", "Kenya": "Nairobi",
            "Peru": "Lima", "Argentina": "Buenos Aires", "Thailand": "Bangkok", "Turkey": "Ankara", "Canada": "Ottawa",
            "Cuba": "Havana", "Iran": "Tehran", "Belgium": "Brussels", "the Netherlands": "Amsterdam",
            "Switzerland": "Bern"}
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def easy_mmlu(seed: int = 0) -> dict[str, list[dict]]:
    """100 self-written 4-choice items in MMLU's layout, easy enough that a 135M model scores well above chance (25%)
    0-shot: capitals (30), the next number (40), the next day (7) and month (12), the previous day (7) and 4 more
    months; {MMLU subject: rows} (subjects lm-eval's MMLU tasks know)."""
    import random

    rng = random.Random(seed)

    def item(question, subject, answer, pool):
        choices = [answer, *rng.sample([c for c in pool if c != answer], 3)]
        rng.shuffle(choices)
        return dict(question=question, subject=subject, choices=choices, answer=choices.index(answer))

    capitals = [item(f"What is the capital of {country}?", "global_facts", city, list(CAPITALS.values()))
                for country, city in CAPITALS.items()]
    numbers = [item(f"Which number comes after {n}?", "elementary_mathematics", str(n + 1),
                    [str(n + d) for d in (-2, -1, 2, 3, 10)] + [str(n + 1)]) for n in range(3, 43)]
    after = [item(f"Which day comes after {DAYS[i]}?", "miscellaneous", DAYS[(i + 1) % 7], DAYS) for i in range(7)]
    after += [item(f"Which month comes after {MONTHS[i]}?", "miscellaneous", MONTHS[(i + 1) % 12], MONTHS)
              for i in range(12)]
    after += [item(f"Which day comes before {DAYS[i]}?", "miscellaneous", DAYS[i - 1], DAYS) for i in range(7)]
    after += [item(f"Which month comes before {MONTHS[i]}?", "miscellaneous", MONTHS[i - 1], MONTHS)
              for i in range(1, 5)]
    return {"global_facts": capitals, "elementary_mathematics": numbers, "miscellaneous": after}


def fixture_eval_data(root: Path, benchmarks=("mmlu", "triviaqa", "minerva_math", "humaneval", "gpqa"),
                      mmlu_subjects: dict[str, list[dict]] | None = None) -> Path:
    """<root>/eval laid out as eval/prepare_eval_data.py does, with a few self-written items per benchmark
    (`mmlu_subjects`: {subject: rows} in place of the default MMLU items)."""
    out = root / "eval"
    mmlu = [dict(question=f"Which number comes after {i}?", subject="x", choices=[str(i + 1), str(i), str(i + 2), "0"],
                 answer=0) for i in range(3)]
    mmlu_subjects = mmlu_subjects or {subject: mmlu for subject in MMLU_SUBJECTS}
    math_rows = [dict(problem=f"What is ${i}+{i}$?", level="Level 1", type="Algebra",
                      solution=f"We add: ${i}+{i}=\\boxed{{{2 * i}}}$.") for i in range(1, 3)]
    humaneval = [dict(task_id="Fixture/0", prompt='def add(a, b):\n    """Return a + b."""\n',
                      canonical_solution="    return a + b\n", entry_point="add",
                      test="def check(candidate):\n    assert candidate(2, 3) == 5\n")]
    trivia = [dict(question=f"Which colour is the sky number {i}", question_id=f"q{i}",
                   answer=dict(value="Blue", aliases=["Blue", "blue"], normalized_aliases=["blue"])) for i in range(3)]
    status = {}
    if "mmlu" in benchmarks:
        for subject, rows in mmlu_subjects.items():
            write_jsonl(out / "mmlu" / subject / "test.jsonl", rows)
            write_jsonl(out / "mmlu" / subject / "dev.jsonl", rows)
        every = [row for rows in mmlu_subjects.values() for row in rows]  # every MMLU task reads the subject tables
        status["mmlu"] = dict(rows={"test": len(every), "dev": len(every)})
    if "minerva_math" in benchmarks:
        for subject in MATH_SUBJECTS:
            write_jsonl(out / "minerva_math" / subject / "test.jsonl", math_rows)
        status["minerva_math"] = dict(rows={"test": 14})
    if "humaneval" in benchmarks:
        write_jsonl(out / "humaneval" / "test.jsonl", humaneval)
        status["humaneval"] = dict(rows={"test": 1})
    if "triviaqa" in benchmarks:
        write_jsonl(out / "triviaqa" / "validation.jsonl", trivia)
        status["triviaqa"] = dict(rows={"validation": 3}, note="fixture")
    if "gpqa" in benchmarks:
        write_jsonl(out / "gpqa" / "train.jsonl", gpqa_rows())
        status["gpqa"] = dict(rows={"train": 4})
    (out / PREPARED_FILE).write_text(json.dumps(status))
    render_tasks(out, list(status))
    return out
