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
