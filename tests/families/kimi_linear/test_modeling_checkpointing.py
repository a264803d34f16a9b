"""Activation checkpointing: every parameter's gradient equals the one without checkpointing.

The reentrant variant only tracks gradients of positional tensor arguments; a layer that received its depth sources as
keyword arguments would silently drop the gradients flowing into earlier blocks. Both variants are checked.
"""
import pytest
import torch

from tests.helpers.model_factory import random_ids, tiny_model


def gradients(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.detach(), {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0), ("standard", 0)])
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_gradients_equal(mode, block_size, reentrant):
    model = tiny_model(mode, block_size).train()
    ids = random_ids()
    loss, expected = gradients(model, ids)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    ckpt_loss, got = gradients(model, ids)
    torch.testing.assert_close(ckpt_loss, loss)
    with_grad = [n for n, g in expected.items() if g is not None]
    assert len(with_grad) > 0.9 * len(expected)
    for name, grad in expected.items():
        if grad is None:
            assert got[name] is None, name
        else:
            assert got[name] is not None, f"{name} lost its gradient under checkpointing"
            torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    # the depth queries of later blocks must learn: their gradient is non-zero
    if mode != "standard":
        assert expected["model.output_attn_res_proj.weight"].abs().sum() > 0
        assert expected["model.layers.4.mlp_res_proj.weight"].abs().sum() > 0
