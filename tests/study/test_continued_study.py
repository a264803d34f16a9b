"""The continued-training study (`attnres continued-study`) on a tiny random Llama standing in for
SmolLM2-135M: the grid runs (four arms, sweep then tuned seeds), a rerun does no work, the one-run command, a bad grid
refused by name before any work, and the report."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from hf_attnres.cli import continued_study
from hf_attnres.study.continued import study as continued_study_module
from hf_attnres.study.continued import train as continued_train
from hf_attnres.study.continued.config import load_continued
from hf_attnres.study.continued.train import TRAINABLE_FILE, restore_model
from tests.helpers.train_fixtures import prepare_tiny_dataset, write_documents


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny random Llama (4 layers, hidden 32) saved with a BPE tokenizer of its vocabulary, and the text files."""
    root = tmp_path_factory.mktemp("continued")
    tokenizer = AutoTokenizer.from_pretrained(prepare_tiny_dataset(root / "bpe") / "tokenizer")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True)
    folder = root / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, write_documents(root / "text")


def grid(tmp_path, tiny, **changes) -> dict:
    folder, files = tiny
    raw = {"name": "tiny", "source": str(folder),
           "data": {"dir": str(tmp_path / "data"),
                    "prepare": ["--files", *map(str, files), "--seq-len", "16", "--validation-fraction", "0.2"]},
           "train": {"max_steps": 2, "micro_batch_size": 2, "seq_len": 16, "warmup_steps": 1},
           "continued": {"block_size": 2, "frozen_arms": ["frozen"]},
           "arms": {"frozen": {"mode": "block"}},
           "groups": {"lr_sweep": {"arms": ["standard", "block", "full", "frozen"],
                                   "lrs": {"standard": [1e-3, 3e-3], "block": [1e-3, 3e-3], "full": [1e-3, 3e-3],
                                           "frozen": [1e-2, 3e-2]}, "seeds": [0]},
                      "tuned": {"arms": ["standard", "block", "full", "frozen"], "seeds": [0, 1]}}}
    raw.update(changes)
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(raw))
    return path


def test_grid_runs_resumes_and_reports(tmp_path, source, monkeypatch, capsys):
    path, out = grid(tmp_path, source), tmp_path / "out"
    assert continued_study.main(["--grid", str(path), "--output-dir", str(out)]) == 0
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert len(runs) == 12  # 4 arms x 2 LRs at seed 0, then seed 1 at each arm's best
    records = {r: json.loads((out / "runs" / r / "result.json").read_text()) for r in runs}
    data = json.loads((tmp_path / "data" / "meta.json").read_text())
    for record in records.values():  # the whole held-out split, every run
        assert record["heldout_sequences"] == data["num_sequences"]["validation"] == len(record["item_loss"])
    # the frozen arm trains only the depth mixing: queries and key norms (2 mix points per layer + the output)
    frozen = next(r for r in records.values() if r["arm"] == "frozen")
    assert frozen["trainable_params"] == (2 * 4 + 1) * 2 * 32
    # the zero line: upcycled at step 0 equals the pretrained model within the upcycling tolerance
    zero = {p.stem: json.loads(p.read_text()) for p in (out / "zero").glob("*.json")}
    assert set(zero) == {"standard", "block-S2", "full"}
    for name in ("block-S2", "full"):
        check = zero[name]["upcycle_check"]
        assert check["max_abs_diff"] <= check["tolerance"]
        assert zero[name]["loss"] == pytest.approx(zero["standard"]["loss"], abs=1e-3)
    summary = (out / "summary.md").read_text()
    for text in ("Zero line", "LR sweep", "paired delta vs standard", "Depth diagnostics", "continued.png",
                 "Verdict against standard", "95% CI", "depth_heatmap.png"):
        assert text in summary
    assert (out / "continued.png").stat().st_size > 0 and (out / "depth_heatmap.png").stat().st_size > 0
    # the queries' movement and the gradient norm per depth group, every step of an AttnRes run
    block = next(r for r in records.values() if r["arm"] == "block")
    # (layer 0's attention mix has one source, the embedding: its query gets an exactly-zero gradient and stays 0)
    assert len(block["query_norms"]) == 2 * 4 + 1 and block["query_norms"][0] == 0
    assert all(n > 0 for n in block["query_norms"][1:])
    assert len(block["grad_norms_by_group"]) == 2
    assert set(block["grad_norms_by_group"][0]) == {"backbone", "queries", "key_norms"}
    standard = next(r for r in records.values() if r["arm"] == "standard")
    assert standard["query_norms"] == [] and set(standard["grad_norms_by_group"][0]) == {"backbone"}
    # a rerun trains nothing
    monkeypatch.setattr(continued_train, "train_step", lambda *a, **k: pytest.fail("a finished run was retrained"))
    capsys.readouterr()
    assert continued_study.main(["--grid", str(path), "--output-dir", str(out)]) == 0
    assert "0 to train" in capsys.readouterr().out


def test_one_run_and_its_model(tmp_path, source, capsys):
    path, out = grid(tmp_path, source), tmp_path / "out"
    assert continued_study.main(["--grid", str(path), "--output-dir", str(out), "--only", "frozen", "--lr", "0.05",
                                 "--seed", "3"]) == 0
    run = out / "runs" / "frozen-lr0.05-L4-h32-seed3"
    record = json.loads((run / "result.json").read_text())
    assert "held-out loss" in capsys.readouterr().out
    # the kept tensors rebuild the trained model: the same held-out loss
    cg = load_continued(path)
    model = restore_model(cg, cg.grid.arm_key("frozen", 0.05, 3), run)
    loss = continued_train.heldout(cg, model, tmp_path / "data", "check")["loss"]
    assert loss == pytest.approx(record["heldout_loss"], rel=1e-5)
    assert (run / TRAINABLE_FILE).stat().st_size < 20_000  # the frozen arm keeps its few tensors only
    diagnostics = [json.loads(line) for line in (run / "diagnostics.jsonl").read_text().splitlines()]
    assert len(diagnostics[-1]["layer_grad_norm"]) == 4 and len(diagnostics[-1]["depth_weights"]) == 2 * 4 + 1


def test_a_gated_arm_trains_its_gates_from_step_one(tmp_path, source):
    """The gated read as an arm (mode "gated"): upcycled at the grid's block size, exact at step 0, and after one
    run its gates are off zero and the kept tensors rebuild the trained model."""
    arms = {"frozen": {"mode": "block"}, "gated": {"mode": "gated", "train": {"attn_res_lr_multiplier": 10}}}
    groups = {"lr_sweep": {"arms": ["standard", "gated"], "lrs": {"standard": [1e-3, 3e-3], "gated": [1e-2, 3e-2]},
                           "seeds": [0]}}
    path, out = grid(tmp_path, source, arms=arms, groups=groups), tmp_path / "out"
    cg = load_continued(path)
    model = continued_train.arm_model(cg, "gated", cg.grid.arms["gated"]["block_size"])
    assert model.config.attn_res_gated_read and model.config.attn_res_block_size == 2
    assert continued_study.main(["--grid", str(path), "--output-dir", str(out), "--only", "gated", "--lr", "0.01",
                                 "--seed", "0"]) == 0
    run = out / "runs" / "gated-lr0.01-L4-h32-seed0"
    restored = restore_model(cg, cg.grid.arm_key("gated", 0.01, 0), run)
    gates = [p for name, p in restored.named_parameters() if name.endswith("_res_gate.weight")]
    assert len(gates) == 2 * 4 + 1 and all(g.abs().max() > 0 for g in gates)
    loss = continued_train.heldout(cg, restored, tmp_path / "data", "check")["loss"]
    assert loss == pytest.approx(json.loads((run / "result.json").read_text())["heldout_loss"], rel=1e-5)
    # its step-0 line: the pretrained model's loss, the upcycling check within its (rounding) tolerance
    zero = continued_study_module.zero_lines(cg, out)
    assert sorted(zero) == ["gated-S2", "standard"]
    assert zero["gated-S2"]["loss"] == pytest.approx(zero["standard"]["loss"], rel=1e-5)
    check = zero["gated-S2"]["upcycle_check"]
    assert check["max_abs_diff"] <= check["tolerance"] <= 1e-3 * check["max_abs_logit"]


@pytest.mark.parametrize("name", ["continued-gpu", "continued-cpu-pair"])
def test_the_committed_continued_grids_hold_a_gated_arm(name, tmp_path):
    """The GPU grid and the CPU pair validate with their gated arms (read, not run), at the Block arms' block size;
    the source is a folder with SmolLM2-135M's sizes (its config only: nothing is loaded)."""
    from pathlib import Path

    (tmp_path / "config.json").write_text(json.dumps(dict(model_type="llama", num_hidden_layers=30, hidden_size=576,
                                                          num_attention_heads=9, max_position_embeddings=8192)))
    cg = load_continued(Path(__file__).resolve().parents[2] / "configs" / "study" / f"{name}.json",
                        resolve_source=lambda _: tmp_path)
    gated = {arm: a for arm, a in cg.grid.arms.items() if a["mode"] == "gated"}
    assert gated and all(arm in cg.grid.groups["tuned"]["arms"] for arm in gated)
    assert {a["block_size"] for a in gated.values()} == {cg.grid.model["block_size"]}


@pytest.mark.parametrize("change, message", [
    (dict(continued={"frozen_arms": ["standard"]}), "continued.frozen_arms"),
    (dict(continued={"device": "tpu"}), "continued.device"),
    (dict(continued={"warp": 1}), "unknown continued fields"),
    (dict(model={"layers": 2}), "'model' is read from the source"),
    (dict(source="no/such/folder"), "source 'no/such/folder'"),
    (dict(lm_eval={"limit": 0}), "lm_eval.limit"),
    (dict(arms={"frozen": {"mode": "block"}, "g": {"mode": "gate"}}), "arms.g.mode must be one of"),
    (dict(arms={"frozen": {"mode": "block"}, "g": {"mode": "gated", "block_size": 0}}), "arms.g.block_size"),
    (dict(groups={"lr_sweep": {"arms": ["block"], "lrs": {"full": [1e-3, 3e-3]}, "seeds": [0]}}),
     "groups.lr_sweep.lrs"),
])
def test_bad_grid_refused_by_name(tmp_path, source, change, message):
    path = grid(tmp_path, source, **change)
    with pytest.raises(SystemExit, match=message.replace("(", r"\(")):
        continued_study.main(["--grid", str(path), "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()  # refused before any work


@pytest.mark.parametrize("text, message", [
    (None, "file not found"), ("{not json", "not valid JSON"), ("[1, 2]", "the grid must be a JSON object"),
    ("[" * 5000, "nested"),
])
def test_bad_grid_file_refused_by_name(tmp_path, text, message):
    path = tmp_path / "grid.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit, match=f"error: .*grid.json.*{message}"):
        continued_study.main(["--grid", str(path), "--output-dir", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="--threads must be >= 1"):
        continued_study.main(["--grid", str(path), "--threads", "0", "--output-dir", str(tmp_path / "out")])
    assert sorted(p.name for p in tmp_path.iterdir()) == (["grid.json"] if text is not None else [])


def test_one_run_flags_checked(tmp_path, source):
    with pytest.raises(SystemExit, match="needs --seed"):
        continued_study.main(["--grid", str(grid(tmp_path, source)), "--only", "block", "--lr", "1e-3"])
    with pytest.raises(SystemExit, match="not an arm"):
        continued_study.main(["--grid", str(grid(tmp_path, source)), "--only", "nope", "--lr", "1e-3", "--seed", "0"])


def test_help_and_registration():
    assert "--only" in continued_study.build_parser().format_help()
    from hf_attnres.cli import COMMANDS

    assert COMMANDS["continued-study"][0] == "continued_study"
