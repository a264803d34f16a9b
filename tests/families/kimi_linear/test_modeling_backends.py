"""The whole model: backend "triton" (Triton interpreter on CPU) equals backend "torch" on the training path (loss and
every gradient) and the inference path (two-phase prefill + decode); chunked prefill equals the unchunked forward."""
import pytest
import torch

from hf_attnres.core import inference
from tests.helpers.cache import cache_of
from tests.helpers.model_factory import random_ids, tiny_model


@pytest.fixture(autouse=True)
def _no_backend_override(monkeypatch):
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)


def with_backend(model, backend):
    model.config.attn_res_backend = backend
    return model


def loss_and_grads(model, ids):
    model.zero_grad()
    loss = model(ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode,block_size,recompute", [("block", 2, True), ("full", 0, False)])
def test_training_step_triton_equals_torch(mode, block_size, recompute):
    model = tiny_model(mode, block_size, num_layers=3)
    model.config.attn_res_recompute = recompute  # Triton: keep no forward statistics, re-read the sources
    ids = random_ids(batch=2, seq=6)
    loss, grads = loss_and_grads(with_backend(model, "torch"), ids)
    triton_loss, triton_grads = loss_and_grads(with_backend(model, "triton"), ids)
    torch.testing.assert_close(triton_loss, loss, rtol=1e-5, atol=1e-5)
    assert triton_grads.keys() == grads.keys() and any("_res_proj" in name for name in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(triton_grads[name], grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0)])
def test_inference_triton_equals_torch(mode, block_size, monkeypatch):
    """Triton in block mode runs the two-phase schedule with fused norms; torch runs the plain loop."""
    phase1_blocks = []
    original = inference.TwoPhaseSchedule.run_phase1
    monkeypatch.setattr(inference.TwoPhaseSchedule, "run_phase1",
                        lambda self, block, bank: phase1_blocks.append(block) or original(self, block, bank))
    model = tiny_model(mode, block_size, num_layers=3)
    ids = random_ids(batch=2, seq=5)
    logits = {}
    for backend in ("torch", "triton"):
        with_backend(model, backend)
        with torch.no_grad():
            prefill = model(ids[:, :4], use_cache=True)
            step = model(ids[:, 4:], cache=cache_of(prefill), use_cache=True)
        logits[backend] = (prefill.logits, step.logits)
    torch.testing.assert_close(logits["triton"], logits["torch"], rtol=1e-4, atol=1e-4)
    # block mode: 2 blocks, Phase 1 each, in prefill and decode, on the Triton backend only; full: plain loop
    assert phase1_blocks == ([0, 1, 0, 1] if mode == "block" else [])


def cache_state(cache):
    """Every tensor of a KimiLinear cache (MLA keys/values, KDA recurrent and conv states), in a stable order."""
    tensors = []
    for layer in cache.layers:
        for value in vars(layer).values():
            if isinstance(value, torch.Tensor):
                tensors.append(value)
            elif isinstance(value, (list, tuple)):
                tensors.extend(v for v in value if isinstance(v, torch.Tensor))
    return tensors


@pytest.mark.parametrize("chunk", [3, 4])
def test_chunked_prefill_equals_unchunked(chunk):
    model = tiny_model("block", 2, num_layers=4)
    ids = random_ids(batch=2, seq=10)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding in one row
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=True)
        chunked = model(ids, attention_mask=mask, use_cache=True, prefill_chunk_size=chunk)
        last = model(ids, attention_mask=mask, use_cache=True, prefill_chunk_size=chunk, logits_to_keep=1)
    torch.testing.assert_close(chunked.logits, full.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(last.logits, full.logits[:, -1:], rtol=1e-4, atol=1e-4)
    want_state, got_state = cache_state(cache_of(full)), cache_state(cache_of(chunked))
    assert len(got_state) == len(want_state) > 0
    for got, want in zip(got_state, want_state):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert cache_of(chunked).get_seq_length() == cache_of(full).get_seq_length()
    next_ids = random_ids(batch=2, seq=1, seed=3)
    next_mask = torch.cat([mask, torch.ones_like(next_ids)], dim=1)
    with torch.no_grad():
        a = model(next_ids, attention_mask=next_mask, cache=cache_of(full), use_cache=True).logits
        b = model(next_ids, attention_mask=next_mask, cache=cache_of(chunked), use_cache=True).logits
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_chunked_prefill_refuses_labels():
    model = tiny_model("block", 2, num_layers=2)
    ids = random_ids(batch=1, seq=6)
    with pytest.raises(ValueError, match="labels"):
        model(ids, labels=ids, prefill_chunk_size=2)


def test_generate_with_chunked_prefill_equals_plain_generate():
    model = tiny_model("block", 2, num_layers=3)
    ids = random_ids(batch=2, seq=9)
    options = dict(max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(ids, prefill_chunk_size=4, **options), model.generate(ids, **options))


def test_compiled_triton_inference_is_one_graph():
    """The Triton ops (mix, Phase 1, Phase 2) are custom ops: torch.compile(fullgraph=True) traces through them."""
    torch._dynamo.reset()
    model = with_backend(tiny_model("block", 2, num_layers=3), "triton")
    ids = random_ids(batch=1, seq=4)
    with torch.no_grad():
        eager = model(ids, use_cache=False).logits
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(ids, use_cache=False).logits
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


def test_the_mix_switches_are_read_once_a_forward_and_follow_config_and_environment(monkeypatch):
    """The model resolves the config's mix switches once per forward (`MixSettings`, a decode step's 2L+1 mix points
    would each pay ~10 us of config reads) and hands them down: a change between forwards still takes effect."""
    from hf_attnres.core.mix_point import MixSettings
    from hf_attnres.kernels.mix import layers  # the package's fused depth mix, bound to every model's mix modules

    resolved, backends = [], []
    real_of, real_mix = MixSettings.of.__func__, layers.attn_res
    monkeypatch.setattr(MixSettings, "of", classmethod(lambda cls, config: resolved.append(1) or real_of(cls, config)))
    monkeypatch.setattr(layers, "attn_res", lambda *a, **k: backends.append(k["backend"]) or real_mix(*a, **k))
    model = with_backend(tiny_model("block", 2, num_layers=3), "cpp")
    ids = random_ids(seq=5)
    with torch.no_grad():
        model(ids)
        assert len(resolved) == 1 and backends and set(backends) == {"cpp"}
        backends.clear()
        monkeypatch.setenv("ATTNRES_BACKEND", "torch")  # the environment wins over the config, as before
        model(ids)
        assert len(resolved) == 2 and set(backends) == {"torch"}
