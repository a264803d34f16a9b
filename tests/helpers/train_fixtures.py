"""Shared helpers of the training tests (no tests here): a tiny prepared dataset and train command lines."""
from __future__ import annotations

import random
from pathlib import Path

from hf_attnres.training.logs import read_jsonl

REPO = Path(__file__).resolve().parents[2]
WORDS = "the a king queen river stone light dark house tree walks runs sees finds under over with and of to in".split()


def write_documents(folder: Path, count: int = 6, lines: int = 60, seed: int = 0) -> list[Path]:
    """A few KB of pseudo-English text, one document per file."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(lines))
        paths.append(folder / f"doc{i}.txt")
        paths[-1].write_text(text)
    return paths


def prepare_tiny_dataset(root: Path, seq_len: int = 32) -> Path:
    """Text files -> BPE (vocab 300) -> packed dataset of `seq_len`-token sequences, via the prepare-data command."""
    from hf_attnres.cli.prepare_data import main as prepare

    files = write_documents(root / "text")
    out = root / "data"
    prepare(
        [*["--files", *map(str, files)], "--tokenizer", "bpe", "--vocab-size", "300", "--seq-len", str(seq_len),
         "--validation-fraction", "0.2", "--output-dir", str(out)]
    )
    return out


def train_args(data: Path, output_dir: Path, **flags) -> list[str]:
    """A tiny, fast train.py command line; `flags` (underscores for dashes) add or replace options."""
    options = dict(data=data, output_dir=output_dir, model_size="tiny", max_steps=6, micro_batch_size=4, warmup_steps=1,
                   lr=3e-3, log_every=1, eval_every=3, eval_batches=1, save_every=3, diagnostics_every=3,
                   no_tensorboard=True)
    options.update(flags)
    # the trainer's tests were written for Kimi Linear's tiny preset (MoE, KDA and MLA layers), named explicitly since
    # a preset without --family is built in Llama; a folder or a --config names its own family
    if options["model_size"] is not None and options.get("config") is None and options.get("init_from") is None:
        options.setdefault("family", "kimi_linear")
    # options another makes meaningless are left out (train refuses a flag that would do nothing): a refusal test
    # appends them to the command line itself
    if options["eval_every"] in (0, "0"):
        options.pop("eval_batches", None)
    if options["diagnostics_every"] and int(options["diagnostics_every"]) > int(options["max_steps"] or 2000):
        del options["diagnostics_every"]
    argv = []
    for key, value in options.items():
        if value is True:
            argv.append(f"--{key.replace('_', '-')}")
        elif value is not None and value is not False:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def train_losses(run_dir: Path, key: str = "train/loss") -> list[float]:
    return [r[key] for r in read_jsonl(Path(run_dir) / "metrics.jsonl") if key in r]


def crash_after_step(step: int, monkeypatch, run) -> None:
    """`run()` a training that crashes (KeyboardInterrupt, as a kill would) right after logging `step`."""
    import pytest

    from hf_attnres.training.logs import MetricsLogger

    log = MetricsLogger.log

    def crashing_log(self, logged_step, **scalars):
        log(self, logged_step, **scalars)
        if logged_step == step:
            raise KeyboardInterrupt("simulated crash")

    with monkeypatch.context() as patch:
        patch.setattr(MetricsLogger, "log", crashing_log)
        with pytest.raises(KeyboardInterrupt):
            run()
