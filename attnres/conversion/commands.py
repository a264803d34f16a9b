"""The `attnres convert` and `attnres push-to-hub` commands (scripts/convert_checkpoint.py, scripts/push_to_hub.py):
their tiny demo inputs when run without arguments, and every refusal as one `error:` line with exit code 1."""
from __future__ import annotations

import sys
from pathlib import Path

from ..folders.checkpoint_files import CheckpointFileError, check_model_folder
from ..utils.safe_paths import interrupt_signal, settle_interrupted, signals_interrupt
from ..utils.tiny import tiny_config
from . import hub
from .convert import convert_checkpoint
from .errors import ConversionError
from .family_convert import convert_family
from .family_source import is_kimi_input
from .fixtures import random_model, write_moonshot_checkpoint
from .hub import build_hub_folder, check_repo_id

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


def check_utf8_path(path: Path, flag: str) -> None:
    """A path that is not valid UTF-8 (a byte string the shell passed through) cannot be named in config files, logs
    or messages: refused by the flag, with its printable form."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = str(path).encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise ConversionError(f"{flag} {shown}: the path is not valid UTF-8; rename it") from None


def convert(args) -> int:
    """Convert args.input -> args.output (the flags of `attnres.cli.convert`); without them, a tiny Moonshot-format
    demo checkpoint is written to outputs/tiny-moonshot and converted to outputs/tiny-moonshot-hf."""
    if args.input is None:
        args.input, args.output, args.force = DEMO_INPUT, DEMO_OUTPUT, True
        write_moonshot_checkpoint(args.input, random_model(tiny_config("block", 2)))
        print(f"wrote a tiny Moonshot-format demo checkpoint to {args.input}")
    try:
        for flag, path in (("input", args.input), ("output", args.output)):
            check_utf8_path(path, flag)
        kimi = is_kimi_input(args.input)
    except ConversionError as error:
        return refused(error)
    if not kimi:
        return convert_family_command(args)
    if args.check:
        return refused(ConversionError("--check applies to the other families (Kimi Linear's upcycle is checked by "
                                       "the tests: tests/conversion/test_convert.py)"))
    try:
        with signals_interrupt():
            plan = convert_checkpoint(
                args.input, args.output, to=args.to, upcycle=args.upcycle, block_size=args.block_size,
                force=args.force, verify=args.verify, max_shard_size=args.max_shard_size, progress=not args.no_progress,
            )
    except ConversionError as error:
        return refused(error)
    except KeyboardInterrupt as stop:
        return interrupted(stop, args.output)
    skipped = f", left {len(plan.reader.skipped)} non-language tensors behind" if plan.reader.skipped else ""
    print(
        f"{args.input} ({plan.source_layout}, attn_res_mode={plan.source_config.attn_res_mode}) -> {args.output} "
        f"({plan.target_layout}, attn_res_mode={plan.target_config.attn_res_mode}): {len(plan.target)} tensors, "
        f"{plan.total_bytes / 2**20:.1f} MiB{skipped}{', verified' if args.verify else ''}"
    )
    return 0


def convert_family_command(args) -> int:
    """`convert` for Llama, Mistral, Qwen2, Qwen3, Gemma 3 (a folder, or a GGUF file): family_convert.py."""
    try:
        with signals_interrupt():
            done = convert_family(args.input, args.output, args.upcycle, args.block_size, to=args.to,
                                  force=args.force, verify=args.verify, check=args.check,
                                  max_shard_size=args.max_shard_size, progress=not args.no_progress)
    except ConversionError as error:
        return refused(error)
    except KeyboardInterrupt as stop:
        return interrupted(stop, args.output)
    layout = f"attn_res_mode={done.mode}" + (f", attn_res_block_size={done.block_size}" if done.mode == "block" else "")
    print(f"{args.input} ({done.source_type}) -> {args.output} ({done.target_type}"
          f"{', ' + layout if done.mode != 'standard' else ', plain'}): {done.tensors} tensors, "
          f"{done.bytes / 2**20:.1f} MiB{', verified' if args.verify else ''}{', checked' if args.check else ''}")
    return 0


def push_to_hub(args) -> int:
    """Build the Hub folder of args.model and upload it to args.repo_id (the flags of `attnres.cli.push_to_hub`);
    without --repo-id or with --dry-run only build it; without --model package a tiny demo model."""
    if args.model is None:
        args.model = DEMO_MODEL
        random_model(tiny_config("block", 2)).save_pretrained(args.model)
        args.force = True
        print(f"wrote a tiny demo model to {args.model}")
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
