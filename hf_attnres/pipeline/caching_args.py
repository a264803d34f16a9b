"""The flags of the cross-stage caching table (hf_attnres/cli/caching_table.py, over `caching.simulate_interleaved`) as
one dataclass, one field per flag (each field declares its flag), with the rule that refuses a count below 1
beside the fields; the defaults are the paper's Fig. 3. No flag makes another meaningless."""
from __future__ import annotations

from dataclasses import dataclass

from ..utils.flags import flag
from ..utils.refusals import below


@dataclass
class CachingArgs:
    stages: int = flag(4, type=int, help="physical stages P")
    virtual: int = flag(2, type=int, help="virtual stages per physical stage V")
    layers_per_chunk: int = flag(1, type=int)
    block_size: int = flag(2, type=int, help="decoder layers per block S")
    cache_own_blocks: bool = flag(False, action="store_true", help="also keep blocks a rank completed itself")

    def problems(self) -> list[str]:
        """The refusal line of each count below 1."""
        return below(self, ("stages", "virtual", "layers_per_chunk", "block_size"), 1)
