"""The flags of `attnres convert` and `attnres push-to-hub` as dataclasses, one field per flag (the parsers in
hf_attnres/cli build them; each field declares its flag), with the rules that refuse a flag another one makes
meaningless beside the fields. Rules that depend on the source's family (`--to moonshot`, `--check`, `--block-size`)
are the convert's own refusals (`hf_attnres.conversion.guards`): the family is known only once the input is read."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..families.upcycle import UPCYCLE_MODES
from ..utils.flags import flag, trust_flag
from ..utils.refusals import combined, needs
from .hub import DEFAULT_LICENSE

DEFAULT_MAX_SHARD_SIZE = "5GB"


@dataclass
class ConvertArgs:
    # None with output None: the tiny demo
    input: Path | None = flag(
        None, positional=True, nargs="?", type=Path,
        help="checkpoint folder (config.json + *.safetensors), or a .gguf file")
    output: Path | None = flag(
        None, positional=True, nargs="?", type=Path, help="folder to create (must not exist, unless --force)")
    to: str = flag("hf", choices=("hf", "moonshot"), help="output layout (default: hf)")
    upcycle: str | None = flag(
        None, choices=UPCYCLE_MODES,
        help="turn a standard-residual checkpoint into "
             "Block or Full AttnRes, pseudo-queries zero (the start of AttnRes fine-tuning), or gated: Block's "
             "sources read as the standard stream plus a zero-initialised gate times the mix (exact, learns at step 1)")
    block_size: int | None = flag(
        None, type=int,
        help="decoder layers per block with --upcycle block or gated, 1 to the "
             "model's layer count (default: about 8 blocks, as in the paper and Kimi K3)")
    verify: bool = flag(
        False, action="store_true",
        help="re-read every written tensor and compare it bit "
             "for bit with the converted input before the output is put in place (other families: also "
             "the reloaded folder's logits on fixed ids, against the source within the tolerance)")
    check: bool = flag(
        False, action="store_true",
        help="other families: print the max |logit difference| of "
             "the written model against the source on fixed ids, the logit scale, the stated tolerance (0 "
             "without --upcycle) and the top-1 agreement; exit 1 with nothing written when outside the "
             "tolerance, when the top-1 token changes, or when the tolerance is not small against the "
             "logits (inconclusive)")
    force: bool = flag(False, action="store_true", help="replace OUTPUT if it exists")
    max_shard_size: str = flag(
        DEFAULT_MAX_SHARD_SIZE,
        help="largest output shard, e.g. 5GB, "
             f"500MB (default {DEFAULT_MAX_SHARD_SIZE})")
    no_progress: bool = flag(False, action="store_true", help="no progress bars")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """INPUT and OUTPUT come together (neither: the tiny demo)."""
        return ["give both INPUT and OUTPUT, or neither (for the tiny demo)"
                if (self.input is None) != (self.output is None) else None]


@dataclass
class PushArgs:
    # None: a tiny demo model
    model: Path | None = flag(None, type=Path, help="checkpoint folder to package (default: a tiny demo model)")
    # None: a dry run
    repo_id: str | None = flag(None, help="Hub repository, e.g. user/name (without it: dry run)")
    output: Path | None = flag(None, type=Path, help="folder to build (default: outputs/hub-<repo or model name>)")
    tokenizer: str | None = flag(None, help="tokenizer folder or Hub id to include (default: --model's own, if any)")
    base_model: str | None = flag(
        None,
        help="Hub id of the model this one was made from, for the card's base_model "
             "(default: the first Hub id in the folder's records: training_info.json's init_from, "
             "config.json's _name_or_path, followed through local --init-from folders; none found: the "
             "card and the output say it is unknown)")
    trust_remote_code: bool = trust_flag()  # --tokenizer DIR's own code
    training_data: str | None = flag(None, help="what the model was trained on, for the model card")
    dataset: list[str] = flag(
        factory=list, action="append",
        help="Hub dataset id for the card metadata "
             "(repeatable)")
    eval_results: Path | None = flag(
        None, type=Path,
        help="eval/compare.py's report.json, lm-eval results JSON (or "
             "{task: {metric: value}}) for the card's evaluation table")
    # None: hub.DEFAULT_LICENSE, and the output says it is the default
    license: str | None = flag(
        None,
        help=f"Hub license identifier of the card (default {DEFAULT_LICENSE}, said so in "
             "the output: check it agrees with the base model's license)")
    private: bool = flag(False, action="store_true", help="create the repository as private")
    commit_message: str | None = flag(None, help="upload commit message")
    dry_run: bool = flag(False, action="store_true", help="build the folder, do not upload")
    force: bool = flag(False, action="store_true", help="replace the output folder if it exists")

    def conflicts(self, given: set[str]) -> list[str | None]:
        """--private and --commit-message shape an upload: refused without --repo-id or with --dry-run (`given`: the
        flags on the command line)."""
        upload = ("private", "commit_message")
        if self.repo_id is None:
            return [needs(given, upload, "--repo-id", "without it nothing is uploaded")]
        return [combined(given, upload, "--dry-run", "nothing is uploaded") if self.dry_run else None]


__all__ = ["ConvertArgs", "PushArgs", "DEFAULT_MAX_SHARD_SIZE"]
