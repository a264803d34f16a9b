"""Command lines declared once, on their dataclass: each field is one flag (`flag(...)` holds its help, type, choices,
metavar, group), and `parser_for` builds the argparse parser from the fields, so a flag and its field cannot drift
apart. Also the argparse types and checks shared by the commands, so a bad flag is argparse's one `error:` line naming
it (exit 2) before any work: a seed numpy cannot take, a size the kernels cannot use, an output file that is a folder.

Why not transformers' HfArgumentParser: it sets each flag's `type` from the annotation, over a validator given in the
metadata (the seed range, `multiple_of`); it names every flag twice (`--max_steps, --max-steps` in `--help`); its bool
flags take an optional value (`--force false`); a list is always `nargs="+"` (no `action="append"`); and it has no
positional arguments, no mutually exclusive groups and one `--help` section per dataclass, where the commands use all
three."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

SEED_MAX = 2**32 - 1  # numpy's (and so transformers.set_seed's) range; torch's is wider


def seed(text: str) -> int:
    """--seed: an integer from 0 to 2**32 - 1 (numpy refuses the rest with a traceback mid-run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be from 0 to {SEED_MAX} (2**32 - 1), got {text}")
    return value


def multiple_of(step: int, why: str):
    """An argparse type: a positive integer divisible by `step` (`why` says which kernel needs it)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < step or value % step:
            raise argparse.ArgumentTypeError(f"must be a positive multiple of {step} ({why}), got {value}")
        return value
    parse.__name__ = f"multiple of {step}"  # argparse names the type in its own messages
    return parse


def check_output_file(parser: argparse.ArgumentParser, flag: str, path) -> None:
    """A results file the command writes at its end: refused now if it is a folder or its folder cannot exist, not
    after minutes of work."""
    path = Path(path)
    if path.is_dir():
        parser.error(f"{flag} {path}: is a folder; give a file name (e.g. {path / 'results.json'})")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        parser.error(f"{flag} {path}: {parent} is a file, so the results cannot be written there")


def flag(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, raw=dataclasses.MISSING,
         names: tuple[str, ...] = (), group: str | None = None, exclusive: str | None = None, positional: bool = False,
         **argparse_kwargs):
    """A dataclass field that is one flag of its command. `default` (or `factory`, for a list) is the field's default
    and the flag's; a field with neither is a required flag, or a required positional argument, unless `raw` gives
    the flag a default of its own: the text a command resolves before it builds the dataclass (a per-device size, a
    comma list), so the field itself has none. `names`: the option strings when they are not `--field-name` (an
    alias, an underscore spelling). `group`: the `--help` section it is listed under; `exclusive`: a key shared by
    the flags of which at most one may be given. `positional`: an argument without a dash, named by the field. The
    rest go to argparse's add_argument as they are (help, type, choices, metavar, nargs, action)."""
    spec = dict(names=tuple(names), group=group, exclusive=exclusive, positional=positional, raw=raw,
                kwargs=argparse_kwargs)
    return dataclasses.field(default=default, default_factory=factory, metadata={"flag": spec})


def flag_spec(field: dataclasses.Field) -> dict | None:
    """The `flag(...)` declaration of a dataclass field (None: the field is no flag)."""
    return field.metadata.get("flag")


def option_strings(field: dataclasses.Field) -> tuple[str, ...]:
    """The strings that name a field's flag on the command line (a positional argument: its name)."""
    spec = flag_spec(field)
    if spec["positional"]:
        return (field.name,)
    return spec["names"] or (f"--{field.name.replace('_', '-')}",)


def field_default(field: dataclasses.Field):
    """A field's default, a fresh one from its factory, or dataclasses.MISSING when it has none."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def parser_for(typed, description: str | None = "", **parser_kwargs) -> argparse.ArgumentParser:
    """The argparse parser of a command, built from its dataclass's `flag` fields in their order: each flag's dest is
    its field's name, so `typed(**vars(parser.parse_args(argv)))` is the parsed command line. `parser_kwargs` go to
    ArgumentParser (prog, usage, formatter_class)."""
    parser_kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)  # a docstring's own lines
    parser = argparse.ArgumentParser(description=description, **parser_kwargs)
    groups: dict[str, argparse._ArgumentGroup] = {}
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for field in dataclasses.fields(typed):
        spec = flag_spec(field)
        if spec is None:
            continue
        container = parser
        if spec["group"] is not None:
            if spec["group"] not in groups:
                groups[spec["group"]] = parser.add_argument_group(spec["group"])
            container = groups[spec["group"]]
        if spec["exclusive"] is not None:
            if spec["exclusive"] not in exclusive:
                exclusive[spec["exclusive"]] = container.add_mutually_exclusive_group()
            container = exclusive[spec["exclusive"]]
        kwargs = dict(spec["kwargs"])
        default = field_default(field) if spec["raw"] is dataclasses.MISSING else spec["raw"]
        if spec["positional"]:
            if default is not dataclasses.MISSING:
                kwargs["default"] = default
        elif default is dataclasses.MISSING:
            kwargs.update(dest=field.name, required=True)
        else:
            kwargs.update(dest=field.name, default=default)
        container.add_argument(*option_strings(field), **kwargs)
    return parser


def trust_flag(group: str | None = None):
    """The `--trust-remote-code` field (utils/trust.py): off unless asked."""
    from .trust import TRUST_FLAG, TRUST_HELP  # trust.py reads the family registry: only for a command with the flag

    return flag(False, names=(TRUST_FLAG,), group=group, action="store_true", help=TRUST_HELP)


__all__ = ["SEED_MAX", "seed", "multiple_of", "check_output_file", "flag", "flag_spec", "option_strings",
           "field_default", "parser_for", "trust_flag"]
