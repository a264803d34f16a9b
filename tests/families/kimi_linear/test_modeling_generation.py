"""generate() with the KimiLinear cache: cached decoding equals recomputation, left padding equals per-sample runs."""
import pytest
import torch

from tests.helpers.model_factory import greedy_without_cache, random_ids, tiny_model

MODES = [("standard", 0), ("block", 2), ("full", 0)]


@pytest.mark.parametrize("mode,block_size", MODES)
def test_cached_greedy_equals_recomputation(mode, block_size):
    model = tiny_model(mode, block_size)
    ids = random_ids(batch=2, seq=7)
    cached = model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(cached, greedy_without_cache(model, ids, 6))


@pytest.mark.parametrize("mode,block_size", MODES)
def test_left_padded_batch_equals_per_sample(mode, block_size):
    model = tiny_model(mode, block_size)
    prompts = [random_ids(1, 9, seed=1)[0], random_ids(1, 5, seed=2)[0]]
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = 1
    batched = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    for row, prompt in enumerate(prompts):
        alone = model.generate(prompt[None], max_new_tokens=5, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert torch.equal(batched[row, width:], alone[0, len(prompt):]), f"row {row} differs"


def test_padded_forward_logits_match_unpadded():
    model = tiny_model("block", 2)
    prompt = random_ids(1, 6, seed=3)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a = model(padded, attention_mask=mask, use_cache=False).logits[:, 3:]
        b = model(prompt, use_cache=False).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
