"""`attnres convert IN OUT [--upcycle block|full|gated]` for a checkpoint of any supported family but Kimi Linear (which
streams tensor by tensor, `hf_attnres.conversion.kimi_linear.convert`): a model folder or a GGUF file that transformers
reads, its family resolved once by `guards.check_request` and handed down.

Without --upcycle the output is the family's own plain folder (model_type `llama`, ..., dequantized weights, the
tokenizer beside it, no remote code): the matched baseline of an upcycled model, from one command. With --upcycle it
is the Block or Full AttnRes model of the Python call `hf_attnres.upcycle(model)`. Every check of `family_source` runs
before a model is built; the output is written by the one folder writer (`atomic`): built in a hidden sibling, it
appears all at once, by rename.

`--verify` reloads the written folder and checks its function: its logits on fixed ids equal the converted model's,
bit for bit, every tensor written equals the model's, and its logits are within the tolerance of the source's (0 for
a plain folder; the epsilon argument's bound for an upcycled one, `upcycle_check`). `--check` prints that comparison:
the max |logit difference|, the logit scale, the tolerance and the top-1 agreement, and passes only where all agree
(`upcycle_check.judge`): within the tolerance, the tolerance small against the logits (else the comparison cannot
tell this model from another: refused as inconclusive), the top-1 token the same. Outside the tolerance, or a top-1
token that changes under a conclusive tolerance, either flag refuses; an inconclusive comparison refuses `--check`
and is a note under `--verify` (whose bit-for-bit checks still hold). Every refusal writes nothing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..families.upcycle import UpcycleError, is_attn_res_tensor, plain_family_model, upcycle
from ..folders.checkpoint_files import check_safetensors, weight_files
from ..folders.model_folder import load, write_model
from .atomic import move_into_place, output_folder
from .errors import ConversionError
from .family_source import FamilySource, open_source
from .guards import Request
from .upcycle_check import judge

# the fixed ids --verify and --check run: 2 sequences of 16 tokens, seeded, within the vocabulary
CHECK_SHAPE, CHECK_SEED = (2, 16), 0


@dataclass
class FamilyConversion:
    source_type: str
    target_type: str
    mode: str  # "standard" for the family's own plain folder
    block_size: int
    tensors: int  # in the written weight files (a tied lm_head is written, and counted, once)
    bytes: int  # of the written weight files
    check: dict | None = None  # the comparison with the source (--verify, --check)


def convert_family(request: Request, upcycle_mode: str | None = None, block_size: int | None = None,
                   verify: bool = False, check: bool = False, force: bool = False, max_shard_size="5GB",
                   progress: bool = True) -> FamilyConversion:
    """Convert the checked request's input (folder or .gguf, of the family `guards.check_request` resolved) into its
    output folder: the family's own plain folder, or upcycled with `upcycle_mode`. ConversionError naming the
    problem, with nothing written."""
    input, output = request.input, request.output
    source = open_source(input, request.family, request.gguf_config, upcycle_mode, block_size)
    say = _progress(progress)
    model = source.load(progress, "upcycling" if upcycle_mode else "writing it as the family's own model")
    tokenizer = source.tokenizer()
    say(f"upcycling to {upcycle_mode} AttnRes" if upcycle_mode else "building the family's own model")
    try:
        target = upcycle(model, upcycle_mode, block_size, family=source.family) if upcycle_mode else \
            plain_family_model(model, family=source.family)
    except UpcycleError as error:
        raise ConversionError(str(error)) from None
    report = None
    with output_folder(output) as building:
        say(f"writing {output}")
        write_model(target, building, tokenizer, max_shard_size=max_shard_size)
        tensors, size = written_weights(building)
        if verify or check:
            written = _reload(building)
            if verify:
                verify_saved(target, written, building)
            report = check_against_source(model, written, upcycle_mode is not None)
            refuse_on_comparison(report, "--check" if check else "--verify", input, output)
            if check:
                print(check_line(report), flush=True)
        move_into_place(building, output, replace=force)
    return FamilyConversion(
        source_type=source.config.model_type, target_type=target.config.model_type, mode=upcycle_mode or "standard",
        block_size=getattr(target.config, "attn_res_block_size", 0), tensors=tensors, bytes=size, check=report,
    )


def refuse_on_comparison(report: dict, flag: str, input: Path, output: Path) -> None:
    """ConversionError when the comparison with the source says another function (outside the tolerance, or the
    top-1 token changed under a conclusive tolerance), or, for --check, when it cannot tell (an inconclusive
    tolerance); --verify notes an inconclusive comparison and goes on (module docstring)."""
    if not report["within"] or (report["conclusive"] and not report["agrees"]):
        raise ConversionError(f"{flag}: {output} computes another function than {input}: {check_line(report)}")
    if not report["conclusive"]:
        if flag == "--check":
            raise ConversionError(f"{flag}: cannot tell whether {output} computes the function of {input}: "
                                  f"{check_line(report)}")
        print(f"note: {check_line(report)}", file=sys.stderr, flush=True)  # a result, not progress: always said


def written_weights(folder: Path) -> tuple[int, int]:
    """(tensors, bytes) of a written folder's weight files, as read back from their headers and sizes: what a
    summary reports, so a tensor shared by two names (a tied lm_head, written once) is counted once. Both convert
    paths' summaries use it."""
    files = weight_files(folder)
    tensors = sum(len([name for name in check_safetensors(file) if name != "__metadata__"]) for file in files)
    return tensors, sum(file.stat().st_size for file in files)


def _progress(enabled: bool):
    def say(line: str) -> None:
        if enabled:
            print(line, file=sys.stderr, flush=True)
    return say


def _reload(folder: Path):
    """The written folder as anyone loads it, through the folder layer's checks (files, weights record)."""
    return load(folder, dtype="auto").eval()


def check_ids(model) -> torch.Tensor:
    generator = torch.Generator().manual_seed(CHECK_SEED)
    return torch.randint(0, model.config.vocab_size, CHECK_SHAPE, generator=generator)


@torch.no_grad()
def verify_saved(model, written, folder: Path) -> None:
    """The written folder computes the model's function (logits on fixed ids, bit for bit) and holds its tensors
    (tied copies are written once)."""
    from safetensors.torch import load_file

    state = model.state_dict()
    tensors = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(path))
    problems = [f"{name}: not written" for name in state if name not in tensors and not _tied(model, name)]
    problems += [f"{name}: differs from the converted model" for name, tensor in tensors.items()
                 if name not in state or not torch.equal(tensor, state[name])]
    if getattr(model.config, "attn_res_mode", "standard") != "standard" and not any(map(is_attn_res_tensor, tensors)):
        problems.append("no AttnRes tensor written")
    ids = check_ids(model)
    if not torch.equal(written(ids).logits, model.eval()(ids).logits):
        problems.append("the reloaded folder's logits differ from the converted model's")
    if problems:
        raise ConversionError.from_problems(problems, f"--verify: {folder}")


@torch.no_grad()
def check_against_source(source, written, upcycled: bool) -> dict:
    """max |logit difference| of the written model against the source on the fixed ids, the logit scale, the top-1
    agreement and the tolerance (0 for a plain folder), judged (`upcycle_check.judge`)."""
    from .upcycle_check import compare

    ids = check_ids(source)
    if upcycled:
        report = compare(source, written, ids)
    else:
        expected, got = source(ids).logits.float(), written(ids).logits.float()
        report = {"max_abs_diff": float((got - expected).abs().max()), "max_abs_logit": float(expected.abs().max()),
                  "top1_agreement": float((got.argmax(-1) == expected.argmax(-1)).float().mean()),
                  "tolerance": 0.0, "tokens": ids.numel()}
    return judge(report)


def check_line(report: dict) -> str:
    return (f"check: max |logit difference| {report['max_abs_diff']:.3g} (logits up to "
            f"{report['max_abs_logit']:.3g}), tolerance {report['tolerance']:.3g}, top-1 agreement "
            f"{report['top1_agreement']:.1%} over {report['tokens']} tokens: {report['verdict']}")


def _tied(model, name: str) -> bool:
    return name == "lm_head.weight" and getattr(model.config, "tie_word_embeddings", False)


__all__ = ["convert_family", "FamilyConversion", "written_weights", "FamilySource", "check_against_source",
           "verify_saved"]
