"""docs/FAMILIES.md's tables are the registry's (hf_attnres/utils/families_doc.py): a stale table fails here, --check
names the file and writes nothing, a file without its markers is one line naming the marker."""
import pytest

from hf_attnres.families.registry import REFUSED, SUPPORTED, declaration
from hf_attnres.utils import families_doc


def test_the_tables_in_the_doc_are_current():
    text = families_doc.DOC.read_text(encoding="utf-8")
    assert families_doc.rendered(text) == text, "run `python -m hf_attnres.utils.families_doc`"
    for model_type in [*SUPPORTED, *REFUSED]:
        assert f"`{model_type}`" in text


@pytest.fixture
def doc_copy(tmp_path, monkeypatch):
    copy = tmp_path / "FAMILIES.md"
    copy.write_text(families_doc.DOC.read_text(encoding="utf-8"))
    monkeypatch.setattr(families_doc, "DOC", copy)
    return copy


def test_check_names_a_stale_doc_and_writes_nothing(doc_copy, capsys):
    stale = doc_copy.read_text().replace("| `phi3_attnres` |", "| `phi3_attn` |")
    doc_copy.write_text(stale)
    assert families_doc.main(["--check"]) == 1
    assert str(doc_copy) in capsys.readouterr().err and doc_copy.read_text() == stale
    assert families_doc.main([]) == 0 and families_doc.main(["--check"]) == 0
    assert "| `phi3_attnres` |" in doc_copy.read_text()


@pytest.mark.parametrize("marker", [families_doc.BEGIN, families_doc.END])
def test_a_missing_marker_is_named(doc_copy, capsys, marker):
    text = doc_copy.read_text().replace(marker, "")
    doc_copy.write_text(text)
    assert families_doc.main([]) == 2
    assert "marker" in capsys.readouterr().err and doc_copy.read_text() == text


def test_how_a_layer_differs_is_written_from_the_declarations_data():
    gemma = families_doc.differences(declaration("gemma3_text"))
    for name in ("`pre_feedforward_layernorm`", "`post_feedforward_layernorm`", "`Gemma3TextScaledWordEmbedding`",
                 "`sqrt_hidden_size`", "rotary base per layer type", "`use_bidirectional_attention` is refused"):
        assert name in gemma
    assert "`resid_mlp_dropout`" in families_doc.differences(declaration("phi3"))
    assert families_doc.differences(declaration("llama")) == ""
    assert "- Gemma 3: " + gemma in families_doc.tables() and "- Llama:" not in families_doc.tables()
