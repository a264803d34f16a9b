"""Token ids and labels of every integer dtype, in every family: in-range ids give the logits of the same ids as
torch.long, and an id or label outside the vocabulary is one ValueError naming the field (compared after widening, so
a small dtype neither wraps nor fails inside torch)."""
import pytest
import torch

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.core.input_checks import widened
from hf_attnres.families.registry import SUPPORTED
from tests.data.unchanged.record import VOCAB, build, config_fields

INTEGER_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
SIGNED = {torch.int8, torch.int16, torch.int32, torch.int64}
IDS = torch.tensor([[3, 5, VOCAB - 1, 7]])


@pytest.fixture(scope="module", params=sorted(SUPPORTED))
def family_model(request):
    model = build(request.param, config_fields(request.param, "block"))
    with torch.no_grad():
        reference = model(IDS).logits
    return model, reference


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
def test_in_range_ids_and_labels_of_any_integer_dtype(family_model, dtype):
    model, reference = family_model
    labels = IDS.clone()
    labels[0, 0] = -100 if dtype in SIGNED else 0
    with torch.no_grad():
        out = model(IDS.to(dtype), labels=labels.to(dtype))
        expected = model(IDS, labels=labels.long())
    assert torch.equal(out.logits, reference)
    assert torch.equal(out.loss, expected.loss)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
@pytest.mark.parametrize("field, bad", [("input_ids", VOCAB), ("input_ids", -1), ("labels", VOCAB), ("labels", -5)])
def test_out_of_range_ids_and_labels_of_any_integer_dtype_are_one_value_error(family_model, dtype, field, bad):
    if bad < 0 and dtype not in SIGNED:
        pytest.skip("an unsigned dtype holds no negative id")
    model, _ = family_model
    ids, labels = IDS.clone(), IDS.clone()
    (ids if field == "input_ids" else labels)[0, 2] = bad
    with pytest.raises(ValueError, match=rf"^{field} must lie in \[0, vocab_size={VOCAB}\)") as raised:
        model(ids.to(dtype), labels=labels.to(dtype))
    assert str(bad) in str(raised.value)


def test_a_vocabulary_larger_than_the_dtype_holds_is_compared_without_wrapping():
    for dtype, top in ((torch.int8, 127), (torch.uint8, 255)):
        ids = torch.tensor([[top]], dtype=dtype)
        assert widened(ids).dtype == torch.long
        assert not bool((widened(ids) >= 300).any())  # in a vocabulary of 300: kept
    assert widened(IDS.int()).dtype == torch.int32  # the embedding takes int32 as it is: no copy


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True, float("nan")], ids=repr)
def test_a_prefill_chunk_size_that_is_not_a_positive_whole_number_is_named(family_model, bad):
    """In the forward and in `generate` (which splits the prompt itself, before the model sees it)."""
    model, _ = family_model
    with pytest.raises(ValueError, match="prefill_chunk_size"):
        model(IDS, prefill_chunk_size=bad)
    with pytest.raises(ValueError, match="prefill_chunk_size"):
        model.generate(IDS, max_new_tokens=1, do_sample=False, prefill_chunk_size=bad)


def test_a_valid_prefill_chunk_size_generates_the_unchunked_tokens(family_model):
    model, _ = family_model
    unchunked = model.generate(IDS, max_new_tokens=3, do_sample=False)
    assert torch.equal(model.generate(IDS, max_new_tokens=3, do_sample=False, prefill_chunk_size=2), unchunked)
