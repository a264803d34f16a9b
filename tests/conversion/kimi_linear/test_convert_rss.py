"""Streaming: converting a checkpoint several times larger than the memory bound keeps peak RSS within it.

The bound: two shards (the one being filled, and as much again while it is written: measured, peak growth rises by
about twice any increase of the shard size), plus one decoder layer read and converted (transformers' merge ops hold
the layer's inputs, intermediates and outputs at once: ~3 layers), plus allocator slack. It does not grow with the
checkpoint.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hf_attnres.conversion.kimi_linear.fixtures import random_model, write_moonshot_checkpoint
from hf_attnres.conversion.kimi_linear.plan import plan_conversion, unit_of
from hf_attnres.utils.tiny import tiny_config

MiB = 2**20
SHARD_BYTES = 4 * MiB
SLACK = 4 * MiB
# A fresh process converts a tiny checkpoint first (lazy imports and caches are not the conversion's memory), then
# resets the kernel's peak-RSS mark (VmHWM), converts the big one and reads the mark.
MEASURE = textwrap.dedent(
    """
    import json, sys, tempfile
    import hf_attnres.conversion as conversion
    from hf_attnres.conversion.kimi_linear.fixtures import random_model, write_moonshot_checkpoint
    from hf_attnres.utils.tiny import tiny_config

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    warm = tempfile.mkdtemp()
    write_moonshot_checkpoint(warm + "/ms", random_model(tiny_config("block", 2, family="kimi_linear")))
    conversion.convert_checkpoint(warm + "/ms", warm + "/hf", progress=False)
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM := current RSS
    conversion.convert_checkpoint(sys.argv[1], sys.argv[2], max_shard_size=int(sys.argv[3]), progress=False)
    print(json.dumps({"before": before, "peak": status("VmHWM")}))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak RSS reset needs Linux /proc")
def test_peak_memory_stays_near_one_shard(tmp_path):
    config = tiny_config("block", 4, num_layers=32, hidden_size=256, moe_intermediate_size=64, num_local_experts=8,
                         intermediate_size=256, kv_lora_rank=32, family="kimi_linear")
    source = write_moonshot_checkpoint(tmp_path / "ms", random_model(config), max_shard_size=SHARD_BYTES)
    plan = plan_conversion(source)
    layer_bytes = {}
    for name, tensor in plan.target.items():
        layer_bytes[unit_of(name)] = layer_bytes.get(unit_of(name), 0) + tensor.numel() * tensor.element_size()
    bound = 2 * SHARD_BYTES + 3 * max(layer_bytes.values()) + SLACK
    assert plan.total_bytes > 3 * bound  # the whole checkpoint in memory would blow the bound several times over

    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(source), str(tmp_path / "hf"), str(SHARD_BYTES)],
        capture_output=True, text=True, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    numbers = json.loads(result.stdout.strip().splitlines()[-1])
    growth = numbers["peak"] - numbers["before"]
    print(f"checkpoint {plan.total_bytes / MiB:.1f} MiB, bound {bound / MiB:.1f} MiB, "
          f"peak RSS growth {growth / MiB:.1f} MiB")
    assert growth < bound, f"peak RSS grew {growth / MiB:.1f} MiB, bound {bound / MiB:.1f} MiB"
    assert len(list((tmp_path / "hf").glob("*.safetensors"))) > 5
