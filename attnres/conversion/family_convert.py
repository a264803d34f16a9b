"""`attnres convert IN OUT [--upcycle block|full]` for a checkpoint of any supported family but Kimi Linear (which
streams tensor by tensor, `attnres.conversion.convert`): a model folder or a GGUF file that transformers reads.

Without --upcycle the output is the family's own plain folder (model_type `llama`, ..., dequantized weights, the
tokenizer beside it, no remote code): the matched baseline of an upcycled model, from one command. With --upcycle it
is the Block or Full AttnRes model of the Python call `attnres.upcycle(model)`. Every check of `family_source` runs
before a model is built; the output is built in a hidden sibling and appears all at once, by rename.

`--verify` reloads the written folder and checks its function: its logits on fixed ids equal the converted model's,
bit for bit, every tensor written equals the model's, and its logits are within the tolerance of the source's (0 for
a plain folder; the epsilon argument's bound for an upcycled one, `upcycle_check`). `--check` prints that comparison:
the max |logit difference|, the tolerance and the top-1 agreement. Outside the tolerance either refuses, with
nothing written.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..families.upcycle import UpcycleError, is_attn_res_tensor, plain_family_model, resolve_block_size, upcycle
from ..folders.model_folder import load, save
from .atomic import check_max_shard_size, check_output, move_into_place, output_folder
from .errors import ConversionError
from .family_source import FamilySource, open_source

# the fixed ids --verify and --check run: 2 sequences of 16 tokens, seeded, within the vocabulary
CHECK_SHAPE, CHECK_SEED = (2, 16), 0


@dataclass
class FamilyConversion:
    source_type: str
    target_type: str
    mode: str  # "standard" for the family's own plain folder
    block_size: int
    tensors: int
    bytes: int
    check: dict | None = None  # the comparison with the source (--verify, --check)


def convert_family(input, output, upcycle_mode: str | None, block_size: int | None = None, to: str = "hf",
                   force: bool = False, verify: bool = False, check: bool = False, max_shard_size="5GB",
                   progress: bool = True) -> FamilyConversion:
    """Convert the checkpoint at `input` (folder or .gguf) into the model folder `output`: the family's own plain
    folder, or upcycled with `upcycle_mode`. ConversionError naming the problem, with nothing written."""
    input = Path(input).resolve()
    if to != "hf":
        raise ConversionError("--to moonshot is Kimi Linear's layout; other families are written as model folders")
    if upcycle_mode is None and block_size is not None:
        raise ConversionError("--block-size applies with --upcycle block only (it sets the new block size)")
    output = check_output(output, force, inputs=[input])
    check_max_shard_size(max_shard_size)
    source = open_source(input)
    say = _progress(progress)
    try:
        if upcycle_mode is not None:  # flags checked before the weights are read
            resolve_block_size(upcycle_mode, block_size, source.config.num_hidden_layers)
        model = source.load(progress)
        say(f"upcycling to {upcycle_mode} AttnRes" if upcycle_mode else "building the family's own model")
        target = upcycle(model, upcycle_mode, block_size) if upcycle_mode else plain_family_model(model)
    except UpcycleError as error:
        raise ConversionError(str(error)) from None
    tokenizer = source.tokenizer()
    report = None
    with output_folder(output) as building:
        say(f"writing {output}")
        if upcycle_mode:  # an AttnRes folder carries its weights record (the folder layer writes it)
            save(target, building, max_shard_size=max_shard_size)
        else:  # the family's own folder: transformers' save, nothing of ours
            target.save_pretrained(building, max_shard_size=max_shard_size)
        if tokenizer is not None:
            tokenizer.save_pretrained(building)
        if verify or check:
            written = _reload(building)
            if verify:
                verify_saved(target, written, building)
            report = check_against_source(model, written, upcycle_mode is not None)
            if check:
                print(check_line(report), flush=True)
            if not report["within"]:
                flag = "--check" if check else "--verify"
                raise ConversionError(f"{flag}: {output} computes another function than {input}: {check_line(report)}")
        move_into_place(building, output, replace=force)
    state = target.state_dict()
    return FamilyConversion(
        source_type=source.config.model_type, target_type=target.config.model_type, mode=upcycle_mode or "standard",
        block_size=getattr(target.config, "attn_res_block_size", 0), tensors=len(state),
        bytes=sum(t.numel() * t.element_size() for t in state.values()), check=report,
    )


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
    agreement and the tolerance (0 for a plain folder), with `within`."""
    from .upcycle_check import compare

    ids = check_ids(source)
    if upcycled:
        report = compare(source, written, ids)
    else:
        expected, got = source(ids).logits.float(), written(ids).logits.float()
        report = {"max_abs_diff": float((got - expected).abs().max()), "max_abs_logit": float(expected.abs().max()),
                  "top1_agreement": float((got.argmax(-1) == expected.argmax(-1)).float().mean()),
                  "tolerance": 0.0, "tokens": ids.numel()}
    report["within"] = report["max_abs_diff"] <= report["tolerance"]
    return report


def check_line(report: dict) -> str:
    return (f"check: max |logit difference| {report['max_abs_diff']:.3g} (logits up to "
            f"{report['max_abs_logit']:.3g}), tolerance {report['tolerance']:.3g}, top-1 agreement "
            f"{report['top1_agreement']:.1%} over {report['tokens']} tokens: "
            f"{'within' if report['within'] else 'OUTSIDE'} the tolerance")


def _tied(model, name: str) -> bool:
    return name == "lm_head.weight" and getattr(model.config, "tie_word_embeddings", False)


__all__ = ["convert_family", "FamilyConversion", "FamilySource", "check_against_source", "verify_saved"]
