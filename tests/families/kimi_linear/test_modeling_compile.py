"""torch.compile(fullgraph=True): same logits as eager, one graph, no recompilation per layer or per source count."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from tests.helpers.model_factory import random_ids, tiny_model


@pytest.mark.slow  # inductor compiles a C++ kernel: ~80 s on 2 CPU cores
@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0)])
def test_compiled_forward_equals_eager(mode, block_size):
    torch._dynamo.reset()
    counters.clear()
    model = tiny_model(mode, block_size, num_layers=4)
    ids = random_ids(seq=8)
    with torch.no_grad():
        eager = model(ids, use_cache=False).logits
        compiled = torch.compile(model, fullgraph=True, backend="eager" if mode == "full" else "inductor")
        first = compiled(ids, use_cache=False).logits
        second = compiled(random_ids(seq=8, seed=5), use_cache=False).logits
        eager_second = model(random_ids(seq=8, seed=5), use_cache=False).logits
    torch.testing.assert_close(first, eager, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(second, eager_second, rtol=1e-4, atol=1e-4)
    # fullgraph=True already fails on any graph break; one frame compiled, never recompiled
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["recompiles"], dict(counters["recompiles"])
