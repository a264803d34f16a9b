"""The flags of `attnres convert` and `attnres push-to-hub` as dataclasses, one field per flag (the parsers in
hf_attnres/cli build them; a test holds fields and flags equal), with the rules that refuse a flag another one makes
meaningless beside the fields. Rules that depend on the source's family (`--to moonshot`, `--check`, `--block-size`)
are the convert's own refusals (`hf_attnres.conversion.guards`): the family is known only once the input is read."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..utils.refusals import combined, needs

DEFAULT_MAX_SHARD_SIZE = "5GB"


@dataclass
class ConvertArgs:
    input: Path | None = None  # None with output None: the tiny demo
    output: Path | None = None
    to: str = "hf"
    upcycle: str | None = None
    block_size: int | None = None
    verify: bool = False
    check: bool = False
    force: bool = False
    max_shard_size: str = DEFAULT_MAX_SHARD_SIZE
    no_progress: bool = False

    def conflicts(self, given: set[str]) -> list[str | None]:
        """INPUT and OUTPUT come together (neither: the tiny demo)."""
        return ["give both INPUT and OUTPUT, or neither (for the tiny demo)"
                if (self.input is None) != (self.output is None) else None]


@dataclass
class PushArgs:
    model: Path | None = None  # None: a tiny demo model
    repo_id: str | None = None  # None: a dry run
    output: Path | None = None
    tokenizer: str | None = None
    base_model: str | None = None
    trust_remote_code: bool = False
    training_data: str | None = None
    dataset: list[str] = field(default_factory=list)
    eval_results: Path | None = None
    license: str | None = None  # None: hub.DEFAULT_LICENSE, and the output says it is the default
    private: bool = False
    commit_message: str | None = None
    dry_run: bool = False
    force: bool = False

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--private and --commit-message shape an upload: refused without --repo-id or with --dry-run (`given`: the
        flags on the command line)."""
        upload = ("private", "commit_message")
        if self.repo_id is None:
            return [needs(given, upload, "--repo-id", "without it nothing is uploaded")]
        return [combined(given, upload, "--dry-run", "nothing is uploaded") if self.dry_run else None]


__all__ = ["ConvertArgs", "PushArgs", "DEFAULT_MAX_SHARD_SIZE"]
