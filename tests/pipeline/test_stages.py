"""The pipe layers, run one after another in one process, are the model: same loss, same gradients, and the tuple
between them has the size `sources_before_layers` predicts (what a stage boundary there carries). So are the
interleaved pipeline's chunks, for every family."""
import copy

import pytest
import torch

from hf_attnres.core.depth_layout import DepthLayout
from hf_attnres.pipeline.interleaved import CausalLMLoss as ChunkLoss
from hf_attnres.pipeline.interleaved import InterleavedChunk, SourceStore, plan_chunks
from hf_attnres.pipeline.layout import single_source_mix_params
from hf_attnres.pipeline.stages import CausalLMLoss, build_pipeline, pipeline_layer_specs
from hf_attnres.pipeline.weights import StateDictWeights
from hf_attnres.utils.tiny import tiny_config
from tests.families.tiny import FAMILIES, attn_res_model
from tests.families.tiny import random_ids as family_ids
from tests.helpers.model_factory import random_ids, tiny_model


def run_pipe_layers(model, ids):
    """The pipe layers built from their specs and run in order (a tied embedding's `lm_head` copy through its
    `forward_fn`, as DeepSpeed runs it); (layers, loss, the tuple widths between them)."""
    specs = pipeline_layer_specs(model.config, StateDictWeights(model.state_dict()))
    layers = [spec.build() for spec in specs]
    x, widths = ids, []
    for spec, layer in zip(specs, layers, strict=True):
        x = spec.forward_fn(layer, x) if getattr(spec, "forward_fn", None) else layer(x)
        if isinstance(x, tuple):
            widths.append(len(x))
    return layers, CausalLMLoss(model.config.vocab_size)(x, ids), widths


def pipe_layers_against_the_model(model, ids):
    """The pipe layers of `model` after one forward and backward of both on `ids`: their loss equals the model's
    exactly, and the depth sources between them are the layout's."""
    reference = model(input_ids=ids, labels=ids, use_cache=False).loss
    reference.backward()
    layers, loss, widths = run_pipe_layers(model, ids)
    loss.backward()
    torch.testing.assert_close(loss, reference, rtol=0, atol=0)
    # embedding output, then after each decoder layer
    assert widths == DepthLayout.of(model.config).sources_before_layers()
    return layers


@pytest.mark.parametrize("mode, block_size", [("block", 2), ("block", 3), ("full", 0), ("standard", 0)])
def test_pipe_layers_equal_the_model(mode, block_size):
    model = tiny_model(mode=mode, block_size=block_size or 2, num_layers=5).train()
    layers = pipe_layers_against_the_model(model, random_ids(batch=2, seq=12))
    params = dict(model.named_parameters())
    for layer in layers:
        for name, param in layer.named_parameters():
            ref = params[layer.model_name(name)]
            if not param.requires_grad:  # a mix over one source: exactly-zero gradient, frozen in the stage
                assert param.grad is None and not ref.grad.any(), name
            else:
                torch.testing.assert_close(param.grad, ref.grad, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode", ["block", "full", "standard"])
def test_frozen_mix_params_are_exactly_those_with_zero_gradient(mode):
    model = tiny_model(mode=mode, num_layers=4).train()
    ids = random_ids(batch=1, seq=8)
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    assert all(p.grad is not None for p in model.parameters())  # every parameter takes part: plain DDP works
    no_grad = {name for name, p in model.named_parameters() if not p.grad.any()}
    predicted = {f"model.layers.{i}.{name}" for i in range(4) for name in single_source_mix_params(model.config, i)}
    assert no_grad == predicted


def test_pipe_layers_cover_every_model_tensor_once():
    model = tiny_model(mode="block", num_layers=5)
    layers = [spec.build() for spec in pipeline_layer_specs(model.config, StateDictWeights(model.state_dict()))]
    names = [layer.model_name(name) for layer in layers for name in layer.state_dict()]
    assert sorted(names) == sorted(model.state_dict())


def test_clear_errors_before_any_work():
    with pytest.raises(ValueError, match="num_stages"):
        build_pipeline(tiny_config(num_layers=3, family="kimi_linear"), StateDictWeights({}), num_stages=4)
    with pytest.raises(ValueError, match="vocab_size"):
        run_pipe_layers(tiny_model(num_layers=2), torch.tensor([[1, 999]]))


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_familys_pipe_layers_equal_the_model(family, mode):
    """Each family's DeepSpeed pipe layers, built from its meta model (rotary embeddings, Gemma's scaled embedding,
    tied embeddings and soft-capping, sliding windows shorter than the sequence), are the model: loss and every
    gradient (a tied matrix's: the sum of its two copies', as DeepSpeed sums them)."""
    model = attn_res_model(family, mode).train()
    layers = pipe_layers_against_the_model(model, family_ids(batch=2, seq=9))
    tied = model.config.tie_word_embeddings
    names = {layer.model_name(name) for layer in layers for name in layer.state_dict()}
    assert names == set(model.state_dict()) - ({"lm_head.weight"} if tied else set())
    # each pipe layer's gradients under the full model's names; a tied matrix's copies summed (as DeepSpeed sums
    # them across stages; built in one process they may be one tensor, counted once)
    grads, seen = {}, set()
    for layer in layers:
        for name, param in layer.named_parameters():
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                full = layer.model_name(name)
                grads[full] = param.grad if full not in grads else grads[full] + param.grad
    params = dict(model.named_parameters())
    assert grads.keys() == {name for name, p in params.items() if p.requires_grad} - set(
        f"model.layers.0.{name}" for name in single_source_mix_params(model.config, 0))
    for name, grad in grads.items():
        torch.testing.assert_close(grad, params[name].grad, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")


def run_interleaved_chunks(model, ids, stages: int = 2, virtual: int = 2):
    """The interleaved pipeline's chunks run one after another in one process. Without caching: a cached source's
    gradient is routed back by the chunk's own backward, which the schedule runs per chunk; one process runs one
    backward over all of them (the 2-process runs of test_interleaved.py check caching)."""
    plans = plan_chunks(DepthLayout.of(model.config), stages, virtual, caching=False)
    stores = [SourceStore() for _ in range(stages)]
    x = (ids,)
    for plan in plans:
        chunk = InterleavedChunk(model, plan, stores[plan.rank])
        chunk.store.microbatch = 0
        x = chunk(*x)
        x = x if isinstance(x, tuple) else (x,)
    return ChunkLoss(model.config.vocab_size)(x[0], ids)


@pytest.mark.parametrize("mode", ["block", "full"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_familys_interleaved_chunks_equal_the_model(family, mode):
    model = attn_res_model(family, mode).train()
    reference = copy.deepcopy(model)
    ids = family_ids(batch=2, seq=9)
    expected = reference(input_ids=ids, labels=ids, use_cache=False).loss
    expected.backward()
    loss = run_interleaved_chunks(model, ids)
    loss.backward()

    torch.testing.assert_close(loss, expected, rtol=0, atol=0)
    grads = {name: p.grad for name, p in reference.named_parameters()}
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
