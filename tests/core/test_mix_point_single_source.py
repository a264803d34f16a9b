"""Layer 0's attention mix point has one source: the mix is the identity. Under autograd it still runs, so its
K3-named tensors take part in the graph with an exactly-zero gradient (plain DDP, gradient checkpointing,
optimizers)."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.model_factory import random_ids, tiny_model


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_every_parameter_gets_a_gradient_layer0_exactly_zero(mode, checkpointing):
    model = tiny_model(mode=mode, num_layers=3).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    ids = random_ids(batch=2, seq=8)
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None for g in grads.values()), [n for n, g in grads.items() if g is None]
    layer0 = {n for n in grads if n.startswith("model.layers.0.self_attention_res_")}
    assert layer0 == {"model.layers.0.self_attention_res_norm.weight", "model.layers.0.self_attention_res_proj.weight"}
    assert all(not grads[n].any() for n in layer0)
    assert grads["model.layers.0.mlp_res_proj.weight"].any()  # the next point has two sources and learns


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["block", "full"])
def test_one_source_mix_is_bit_identical_with_and_without_autograd(mode, dtype):
    model = tiny_model(mode=mode, num_layers=3, dtype=dtype)
    ids = random_ids(batch=2, seq=8)
    with torch.no_grad():  # the skipped path
        skipped = model(input_ids=ids, use_cache=False, output_attn_res_weights=True)
    computed = model(input_ids=ids, use_cache=False, output_attn_res_weights=True)  # the computed path
    assert torch.equal(computed.logits, skipped.logits)
    assert torch.equal(computed.attn_res_weights[0], skipped.attn_res_weights[0])  # exactly 1.0


def test_adamw_groups_leave_layer0_tensors_unchanged():
    from types import SimpleNamespace

    from hf_attnres.training.loop import build_optimizer

    model = tiny_model(mode="block", num_layers=3).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()
              if n.startswith("model.layers.0.self_attention_res")}
    optimizer = build_optimizer(model, SimpleNamespace(lr=1e-2, weight_decay=0.1, res_proj_lr=None,
                                                       res_proj_weight_decay=0.0))
    for _ in range(2):
        ids = random_ids(batch=2, seq=8)
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], t) for n, t in before.items())
