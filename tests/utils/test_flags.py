"""The command-line builder: a dataclass's `flag` fields become its argparse parser (hf_attnres/utils/flags.py)."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from hf_attnres.utils.flags import flag, parser_for


def test_the_parser_is_what_the_fields_declare():
    @dataclasses.dataclass
    class Example:
        path: Path = flag(positional=True, type=Path, help="a path")
        count: int = flag(3, type=int, group="numbers", help="how many")
        tags: list[str] = flag(factory=list, action="append", help="a tag")
        quiet: bool = flag(False, action="store_true", exclusive="noise", help="say less")
        loud: bool = flag(False, action="store_true", exclusive="noise", help="say more")
        rank: int | None = flag(None, names=("--local_rank", "--local-rank"), type=int, help=argparse.SUPPRESS)

    parser = parser_for(Example, "an example")
    assert Example(**vars(parser.parse_args(["p"]))) == Example(Path("p"), 3, [], False, False, None)
    parsed = Example(**vars(parser.parse_args(["p", "--count", "5", "--tags", "a", "--tags", "b", "--local_rank=1"])))
    assert (parsed.count, parsed.tags, parsed.rank) == (5, ["a", "b"], 1)
    assert [g.title for g in parser._action_groups][-1] == "numbers"
    with pytest.raises(SystemExit):
        parser.parse_args(["p", "--quiet", "--loud"])
    with pytest.raises(SystemExit):
        parser.parse_args([])


def test_a_field_with_a_raw_default_is_optional_on_the_command_line():
    """A field without a default whose flag has its own (the raw value a command resolves, e.g. per device) may be
    left out; a field with neither is a required flag."""
    @dataclasses.dataclass
    class Resolved:
        sizes: list[int] = flag(raw="1,2", help="comma list")
        name: str = flag(help="required")

    parser = parser_for(Resolved)
    assert vars(parser.parse_args(["--name", "n"])) == {"sizes": "1,2", "name": "n"}
    with pytest.raises(SystemExit):
        parser.parse_args([])


def test_a_field_without_flag_is_no_flag():
    @dataclasses.dataclass
    class Mixed:
        shown: int = flag(1, type=int, help="a flag")
        internal: int = 0

    assert [action.dest for action in parser_for(Mixed)._actions] == ["help", "shown"]
