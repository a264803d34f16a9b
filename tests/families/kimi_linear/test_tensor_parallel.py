"""transformers' tensor parallelism (`from_pretrained(..., tp_plan="auto")`, Kimi Linear's `base_model_tp_plan`) on 2
gloo processes (tests/helpers/tp_worker.py): block and full AttnRes give the unsharded model's logits. What shards is
Kimi Linear's plan: the MLPs (dense and shared experts; the routed experts too where the installed transformers' plan
lists them: up to 5.24, 5.25 moved them to its expert-parallel plan), embedding and lm_head; attention (KDA and
MLA), the routers, the norms and every AttnRes mix tensor (pseudo-queries, key-norm gains) stay replicated, and the
depth sources are full hidden-size tensors on every rank (docs/TRAINING.md)."""
import os
import subprocess
import sys

import pytest
import torch
from transformers import KimiLinearConfig

from hf_attnres import KimiLinearAttnResForCausalLM
from tests.helpers.model_factory import random_ids, tiny_model
from tests.helpers.ports import free_port
from tests.helpers.tolerance import assert_caught, assert_logits_close, dropped_depth_source, flipped_bit
from tests.helpers.toolchain_fixtures import REPO


@pytest.mark.slow
def test_tp_plan_auto_gives_the_unsharded_logits(tmp_path):
    for mode in ("block", "full"):
        tiny_model(mode).save_pretrained(tmp_path / mode)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", f"--master_port={free_port()}",
               str(REPO / "tests" / "helpers" / "tp_worker.py"), str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO)))
    assert result.returncode == 0 and result.stdout.count("ok tp") == 2, result.stderr[-4000:]
    for mode in ("block", "full"):
        tp = torch.load(tmp_path / f"{mode}-tp.pt", weights_only=True)
        model = KimiLinearAttnResForCausalLM.from_pretrained(tmp_path / mode)
        with torch.no_grad():
            logits = model(random_ids(2, 8, seed=7)).logits
        assert tp["world"] == 2
        # a sharded MLP / head sums its partial products across ranks: another reduction order (helpers/tolerance.py)
        assert_logits_close(tp["logits"], logits, model.config)
        sharded = set(tp["sharded"])
        routed = "model.layers.1.mlp.experts.gate_up_proj"
        assert "model.layers.0.mlp.gate_proj.weight" in sharded
        assert (routed in sharded) == ("layers.*.mlp.experts.gate_up_proj" in KimiLinearConfig.base_model_tp_plan)
        assert not any("_res_" in name or "self_attn" in name for name in sharded)  # replicated, as documented


@pytest.mark.parametrize("mode", ["block", "full"])
def test_the_tp_tolerance_catches_a_flipped_bit_and_a_dropped_source(mode):
    """The tolerance above is no blanket: one bit of one weight flipped, or the output mix missing a depth source,
    moves the unsharded model's logits by many times that tolerance."""
    model, ids = tiny_model(mode), random_ids(2, 8, seed=7)
    with torch.no_grad():
        expected = model(ids).logits
        with flipped_bit(model):
            assert_caught(model(ids).logits, expected, model.config, f"{mode}: a flipped bit")
        with dropped_depth_source():
            assert_caught(model(ids).logits, expected, model.config, f"{mode}: a dropped source")
