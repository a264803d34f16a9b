"""The flags of the cross-stage caching table (hf_attnres/cli/caching_table.py, over `caching.simulate_interleaved`) as
one dataclass, one field per flag (a test holds fields and flags equal), with the rule that refuses a count below 1
beside the fields; the defaults are the paper's Fig. 3. No flag makes another meaningless."""
from __future__ import annotations

from dataclasses import dataclass

from ..utils.refusals import below


@dataclass
class CachingArgs:
    stages: int = 4
    virtual: int = 2
    layers_per_chunk: int = 1
    block_size: int = 2
    cache_own_blocks: bool = False

    def problems(self) -> list[str]:
        """The refusal line of each count below 1."""
        return below(self, ("stages", "virtual", "layers_per_chunk", "block_size"), 1)
