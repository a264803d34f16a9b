"""The flags of `bench-model`, `bench-kernels`, `demo` and the GPU evidence run (scripts/gpu_evidence.sh) as
dataclasses, one field per flag, with the rules that refuse a flag another one makes meaningless beside the fields.
The benchmarks' dataclasses hold the values their parsers in hf_attnres/cli resolve (the device picked, comma lists
split, per-device defaults filled), so they have no defaults: the parsers own them and resolve them against the
device. The Inkling-2 benchmark's flags need no resolving: its dataclass carries their defaults."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..utils.refusals import below, combined


@dataclass
class BenchModelArgs:
    device: str
    dtype: str
    modes: list[str]
    phases: list[str]
    hidden: int
    layers: int
    block_size: int
    attention: str
    mlp: str
    batch: int
    seq: int
    decode_steps: int
    long_prompt: int
    chunk: int
    repeats: int
    backend: str
    two_phase: str
    allocator: str
    skip_memory: bool
    output: str

    def conflicts(self, given: set[str]) -> list[str | None]:
        """Flags of a mode or phase that is not benchmarked (`given`: the flags on the command line)."""
        phases = f"--phases {','.join(self.phases)}"
        return [
            combined(given, ("block_size",), f"--modes {','.join(self.modes)}", "no block mode is benchmarked")
            if not any("block" in mode for mode in self.modes) else None,
            combined(given, ("decode_steps",), phases, "the decode phase is not run")
            if "decode" not in self.phases else None,
            combined(given, ("long_prompt", "chunk"), phases, "the long_prefill phase is not run")
            if "long_prefill" not in self.phases else None,
        ]


@dataclass
class BenchKernelsArgs:
    device: str
    dtype: str
    hidden: list[int]
    sources: list[int]
    tokens: list[int]
    impls: list[str]
    repeats: int
    clock: str
    threads: int | None
    peers_path: str
    output: str

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--clock picks the clock of CPU runs (`given`: the flags on the command line)."""
        return [combined(given, ("clock",), "a GPU run (--device cuda, or auto on a GPU)",
                         "--clock picks the clock of CPU runs") if self.device == "cuda" else None]


@dataclass
class DemoArgs:
    mode: str = "block"
    block_size: int = 2
    layers: int = 6
    steps: int = 30
    new_tokens: int = 12
    plot: str | None = None
    seed: int = 0

    def conflicts(self, given: set[str]) -> list[str | None]:
        """Blocks exist in block mode only (`given`: the flags on the command line)."""
        return [combined(given, ("block_size",), f"--mode {self.mode}", "blocks exist in block mode only")
                if self.mode != "block" else None]


@dataclass
class EvidenceArgs:
    """The GPU evidence run; its paths and steps are checked before anything runs (`evidence.check_args`)."""

    out: Path
    only: str | None = None
    peers: Path | None = None
    source: Path | None = None
    data: Path | None = None
    cap: list[str] = field(default_factory=list)
    dry_run: bool = False


INKLING2_MEASUREMENTS = ("mix_q1", "mix_q3", "step")


@dataclass
class BenchInkling2Args:
    """`python -m hf_attnres.cli.bench_inkling2` (hf_attnres.bench.inkling2): transformers' own Inkling-2 against the
    same model on the Inkling kernels."""

    device: str = "cpu"
    dtype: str = "float32"
    hidden: int = 1024
    layers: int = 12
    block: int = 3
    vocab: int = 4096
    batch: int = 1
    seq: int = 512
    threads: int = 1
    repeats: int = 5
    measurements: str = ",".join(INKLING2_MEASUREMENTS)
    output: str | None = None
    child: str | None = None  # "<measurement>:<arm>": the run of one arm, in a child process of the benchmark

    def problems(self) -> list[str]:
        """The refusal line of each size below 1 and of an unknown measurement."""
        found = below(self, ("hidden", "layers", "block", "vocab", "batch", "seq", "threads", "repeats"), 1)
        unknown = [m for m in self.measurements.split(",") if m not in INKLING2_MEASUREMENTS]
        if unknown:
            found.append(f"--measurements: unknown {unknown}; choose from {', '.join(INKLING2_MEASUREMENTS)}")
        return found
