"""The flags of the cross-stage caching table (attnres/cli/caching_table.py, over `caching.simulate_interleaved`) as
one dataclass, one field per flag (a test holds fields and flags equal); the defaults are the paper's Fig. 3. No flag
makes another meaningless; the simulator refuses a count below 1 by name."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CachingArgs:
    stages: int = 4
    virtual: int = 2
    layers_per_chunk: int = 1
    block_size: int = 2
    cache_own_blocks: bool = False
