"""The evaluation report's held-out section: both bits-per-byte numbers, each named."""
from hf_attnres.evaluation.report import heldout_pooled_lines


def test_heldout_pooled_section_names_both_averages():
    heldout = {"standard": dict(bpb=4.4602, loss=6.0867, bytes=123456, sequences=778),
               "block": dict(bpb=4.4598, loss=6.0862, bytes=123456, sequences=778)}
    text = "\n".join(heldout_pooled_lines(heldout, ["standard", "block"]))
    assert "## Held-out, pooled" in text and "means over validation sequences" in text
    assert "| standard | 4.4602 | 6.0867 | 123,456 | 778 |" in text and "| block | 4.4598 | 6.0862 |" in text


def test_no_heldout_no_section():
    assert heldout_pooled_lines(None, ["a"]) == [] and heldout_pooled_lines({}, ["a"]) == []


def minimal_report(created: str, limit=None, skipped=()):
    models = [dict(label=label, path=f"/models/{label}", attn_res_mode="standard", parameters=10,
                   attn_res_parameters=0, tokens_trained=None, data_fingerprint=None) for label in ("a", "b")]
    return dict(created=created, models=models, matched=[], tasks={}, notes=[], skipped=list(skipped),
                settings=dict(tasks=["heldout"], num_fewshot=None, limit=limit, seed=1, max_length=8))


def test_skipped_tasks_are_named_in_report_md_with_the_command(tmp_path):
    from hf_attnres.evaluation.report import render_markdown

    skipped = [dict(tasks=["attnres_mmlu_bpb"], reason="mmlu: its data is not prepared in data/eval",
                    how="attnres prepare-eval-data --benchmarks mmlu --output-dir data/eval")]
    text = render_markdown(minimal_report("t1", skipped=skipped))
    assert "## Skipped" in text
    assert ("- attnres_mmlu_bpb: mmlu: its data is not prepared in data/eval; to run: "
            "`attnres prepare-eval-data --benchmarks mmlu --output-dir data/eval`") in text
    assert "## Skipped" not in render_markdown(minimal_report("t1"))


def test_a_report_of_another_comparison_is_moved_aside_never_overwritten(tmp_path):
    """Same models and settings: replaced (a rerun). Other settings: the earlier report moves to previous/<time>/,
    byte for byte, and the new report names where."""
    from hf_attnres.evaluation.report import write_report

    first = minimal_report("2026-01-01T00:00:00+00:00")
    write_report(first, tmp_path)
    assert first["previous_report"] is None
    rerun = minimal_report("2026-01-01T01:00:00+00:00")
    write_report(rerun, tmp_path)
    assert rerun["previous_report"] is None and not (tmp_path / "previous").exists()
    earlier = (tmp_path / "report.md").read_bytes()
    other = minimal_report("2026-01-02T00:00:00+00:00", limit=3)
    write_report(other, tmp_path)
    moved = tmp_path / "previous" / "2026-01-01T01-00-00-00-00"
    assert other["previous_report"] == str(moved)
    assert (moved / "report.md").read_bytes() == earlier and (moved / "report.json").is_file()
    assert "limit 3" in (tmp_path / "report.md").read_text()
    import json

    assert json.loads((tmp_path / "report.json").read_text())["previous_report"] == str(moved)


def test_a_metric_without_per_item_values_is_named_with_its_aggregate():
    """A corpus-level metric (BLEU: per-item pairs) and a task that scored nothing are named, never left out."""
    from hf_attnres.evaluation.report import unscored

    items = {"acc,none": {"t/0": 1.0, "t/1": 0.0}}
    results = {"t": {"alias": "t", "acc,none": 0.5, "acc_stderr,none": 0.5, "bleu,none": 12.25,
                     "bleu_stderr,none": "N/A"}}
    records = {label: {"t": dict(items=items, lm_eval_results=results), "empty": dict(items={})}
               for label in ("a", "b")}
    [bleu, empty] = unscored(records, ["a", "b"])
    assert bleu["tasks"] == ["t"] and "bleu has no per-item values" in bleu["reason"]
    assert "bleu 12.2500" in bleu["reason"]
    assert empty == dict(tasks=["empty"], reason="no item was scored", see="check the task's data and --limit")
    records["a"]["t"]["items"] = {**items, "bleu,none": {"t/0": 3.0}}
    assert [entry["tasks"] for entry in unscored(records, ["a", "b"])] == [["empty"]]
