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
    for dtype in (torch.float32, torch.bool):  # no ids: left for the embedding to refuse, not truncated
        assert widened(IDS.to(dtype)).dtype == dtype


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


@pytest.mark.parametrize("inputs, message", [
    (lambda m: dict(input_ids=IDS, inputs_embeds=m.get_input_embeddings()(IDS)), "exactly one of input_ids"),
    (lambda m: dict(input_ids=IDS.float()), r"^input_ids must hold integer token ids"),
    (lambda m: dict(input_ids=IDS[0]), r"^input_ids must have shape \[batch, seq_len\]"),
    (lambda m: dict(inputs_embeds=m.get_input_embeddings()(IDS)[..., :4]), r"^inputs_embeds must have shape"),
    (lambda m: dict(inputs_embeds=m.get_input_embeddings()(IDS).double()), r"^inputs_embeds has dtype torch.float64"),
    (lambda m: dict(input_ids=IDS[:, :0]), r"^empty input"),
    (lambda m: dict(input_ids=IDS, attention_mask=torch.ones(1, 2, dtype=torch.long)), r"^attention_mask must have"),
    (lambda m: dict(input_ids=IDS, attention_mask=torch.ones(1, 1, 4, 4, 1)), r"^attention_mask must be 2-D"),
    (lambda m: dict(input_ids=IDS, attention_mask=torch.full((1, 4), 2)), r"^attention_mask must hold only 0"),
])
def test_a_bad_input_is_one_value_error_naming_it(family_model, inputs, message):
    """The package's checks of every forward's inputs, in every family: shapes, dtypes, the mask's values."""
    model, _ = family_model
    with pytest.raises(ValueError, match=message), torch.no_grad():
        model(**inputs(model))
