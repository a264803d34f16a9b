"""The `attnres convert` and `attnres push-to-hub` commands (scripts/convert_checkpoint.py, scripts/push_to_hub.py),
taking their parsed flags (`args.ConvertArgs`, `args.PushArgs`): their tiny demo inputs when run without arguments,
and every refusal as one `error:` line with exit code 1."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..folders.checkpoint_files import CheckpointFileError, check_model_folder
from ..utils.safe_paths import interrupt_signal, settle_interrupted, signals_interrupt
from ..utils.tiny import DEFAULT_FAMILY, tiny_config
from . import hub
from .args import ConvertArgs, PushArgs
from .errors import ConversionError
from .family_convert import FamilyConversion, convert_family, written_weights
from .guards import KIMI, Request, check_request
from .hub import build_hub_folder, check_repo_id
from .kimi_linear.convert import convert_checkpoint
from .kimi_linear.fixtures import random_model, write_moonshot_checkpoint

DEMO_INPUT, DEMO_OUTPUT = Path("outputs/tiny-moonshot"), Path("outputs/tiny-moonshot-hf")
DEMO_MODEL = Path("outputs/tiny-attnres")


def refused(error: Exception) -> int:
    print(f"error: {error}\nnothing was written.", file=sys.stderr)
    return 1


def interrupted(stop: KeyboardInterrupt, output: Path) -> int:
    """Ctrl-C or SIGTERM while building `output`: one line, and the exit code a shell gives that signal (130, 143).
    The half-built folder is gone already (`temporary_folder`); an old output caught stepping aside goes back."""
    replaced = settle_interrupted(output)
    print(f"interrupted: {output} had already been replaced, complete" if replaced else
          "interrupted: nothing written", file=sys.stderr)
    return 128 + interrupt_signal(stop)


def convert(args: ConvertArgs) -> int:
    """Convert args.input -> args.output (`attnres convert`); without them, a tiny Moonshot-format demo checkpoint is
    written to outputs/tiny-moonshot and converted to outputs/tiny-moonshot-hf. The request is checked and the
    source's family resolved once (`guards.check_request`), then the family's path runs: Kimi Linear streams tensor
    by tensor (`convert.convert_checkpoint`), every other family goes through its model (`family_convert`)."""
    if args.input is None:
        args = replace(args, input=DEMO_INPUT, output=DEMO_OUTPUT, force=True)
        write_moonshot_checkpoint(args.input, random_model(tiny_config("block", 2, family="kimi_linear")))
        print(f"wrote a tiny Moonshot-format demo checkpoint to {args.input}")
    try:
        request = check_request(args)
        with signals_interrupt():
            if request.family == KIMI:
                line = convert_kimi(request, args)
            else:
                done = convert_family(request, args.upcycle, args.block_size, verify=args.verify, check=args.check,
                                      force=args.force, max_shard_size=args.max_shard_size,
                                      progress=not args.no_progress)
                line = family_line(args, done)
    except ConversionError as error:
        return refused(error)
    except KeyboardInterrupt as stop:
        return interrupted(stop, args.output)
    print(line)
    return 0


def convert_kimi(request: Request, args: ConvertArgs) -> str:
    """Kimi Linear's streaming conversion; its one-line summary (tensors and bytes as written: `written_weights`)."""
    plan = convert_checkpoint(
        request.input, request.output, to=args.to, upcycle=args.upcycle, block_size=args.block_size,
        force=args.force, verify=args.verify, max_shard_size=args.max_shard_size, progress=not args.no_progress,
    )
    skipped = f", left {len(plan.reader.skipped)} non-language tensors behind" if plan.reader.skipped else ""
    tensors, size = written_weights(request.output)
    return (f"{args.input} ({plan.source_layout}, attn_res_mode={plan.source_config.attn_res_mode}) -> {args.output} "
            f"({plan.target_layout}, attn_res_mode={plan.target_config.attn_res_mode}): {tensors} tensors, "
            f"{size / 2**20:.1f} MiB{skipped}{', verified' if args.verify else ''}")


def family_line(args: ConvertArgs, done: FamilyConversion) -> str:
    """The one-line summary of another family's conversion."""
    # the upcycle mode "gated" is Block's layout with the gated read (hf_attnres.core.gated_read)
    mode, gated = ("block", ", attn_res_gated_read=True") if done.mode == "gated" else (done.mode, "")
    layout = f"attn_res_mode={mode}" + (f", attn_res_block_size={done.block_size}" if mode == "block" else "") + gated
    return (f"{args.input} ({done.source_type}) -> {args.output} ({done.target_type}"
            f"{', ' + layout if done.mode != 'standard' else ', plain'}): {done.tensors} tensors, "
            f"{done.bytes / 2**20:.1f} MiB{', verified' if args.verify else ''}{', checked' if args.check else ''}")


def push_to_hub(args: PushArgs) -> int:
    """Build the Hub folder of args.model and upload it to args.repo_id (the flags of `hf_attnres.cli.push_to_hub`);
    without --repo-id or with --dry-run only build it; without --model package a tiny demo model."""
    if args.model is None:
        args = replace(args, model=DEMO_MODEL, force=True)
        import torch

        from ..families.registry import family_classes

        torch.manual_seed(0)  # the default family's tiny Block AttnRes model, as `tiny_config` builds it
        family_classes(DEFAULT_FAMILY)[1](tiny_config("block", 2, family=DEFAULT_FAMILY)).save_pretrained(args.model)
        print(f"wrote a tiny demo {DEFAULT_FAMILY} model to {args.model}")
    try:  # every input checked before the build (the model folder, the repository id)
        check_model_folder(args.model, "--model")
        if args.repo_id is not None:
            check_repo_id(args.repo_id)
    except (ConversionError, CheckpointFileError) as error:
        return refused(error)
    name = (args.repo_id or args.model.resolve().name).replace("/", "--")
    output = args.output or Path("outputs") / f"hub-{name}"
    try:
        with signals_interrupt():
            folder = build_hub_folder(
                args.model, output, tokenizer=args.tokenizer, training_data=args.training_data, datasets=args.dataset,
                eval_results=args.eval_results, repo_id=args.repo_id, license=args.license, force=args.force,
                trust_remote_code=args.trust_remote_code, base_model=args.base_model,
            )
    except (OSError, ValueError) as error:  # ConversionError, damaged files, a tokenizer that does not load
        return refused(error)
    except KeyboardInterrupt as stop:
        return interrupted(stop, output)
    print(f"built {folder}: " + ", ".join(sorted(p.name for p in folder.iterdir())))
    print("\n".join(hub.card_notes(folder)))  # the card's license and base_model, and where each came from
    if args.dry_run or not args.repo_id:
        print("dry run: not uploaded" + ("" if args.repo_id else " (no --repo-id)"))
        return 0
    try:
        url = hub.upload_folder(  # looked up here: tests replace it
            folder, args.repo_id, private=args.private, commit_message=args.commit_message)
    except Exception as error:  # noqa: BLE001  network, authentication, Hub errors: one line, the folder is kept
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"error: upload to {args.repo_id} failed ({type(error).__name__}: {reason}); the built folder "
              f"{folder} is kept: retry when the Hub is reachable and you are logged in (`hf auth login`)",
              file=sys.stderr)
        return 1
    print(f"uploaded: {url}")
    return 0


__all__ = ["convert", "push_to_hub"]
