"""Build the folder that goes to the Hugging Face Hub (weights, config with auto_map, remote code, tokenizer, model
card) and upload it with huggingface_hub.

Every family alike: a Kimi Linear checkpoint (HF-native or Moonshot's layout) and the other families' AttnRes
checkpoints (Llama, Mistral, Qwen2, Qwen3, Gemma 3 text; `model_type` `<family>_attnres`) are saved with their
generated code files and `auto_map` (hf_attnres.folders.remote_code), so the Hub copy loads with
`trust_remote_code=True`
alone, and the card says so in one text for all. A family's own standard checkpoint has no AttnRes to publish:
refused, naming the upcycle command.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

from huggingface_hub import HfApi, ModelCard, ModelCardData

from ..core.versions import TRANSFORMERS_RANGE
from ..families.registry import family_classes
from ..folders.checkpoint_files import CheckpointFileError, check_model_folder, read_json_file
from ..folders.json_limits import loads_limited
from ..folders.model_family import family_of_folder
from ..folders.model_folder import load as load_model_folder
from ..folders.model_folder import write_model
from ..folders.remote_code import code_file_names
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from ..utils.tokenizer_files import TOKENIZER_FILES, has_tokenizer
from ..utils.trust import load_kwargs
from .atomic import move_into_place, output_folder
from .errors import ConversionError
from .guards import check_output
from .kimi_linear.config import drop_moonshot_fields

# A folder push-to-hub built holds this record of what it was built from and what it wrote (sha256 of each): a later
# run with the same inputs reuses it while its files are as written (the upload after a --dry-run), anything else
# rebuilds it in place; a folder without it is not ours and is refused. It also keeps what the card was given or found
# (license, base_model), for the lines the command prints.
BUILD_RECORD = ".attnres_hub_build.json"
DEFAULT_LICENSE = "apache-2.0"
# Hub license identifiers: lowercase letters, digits, ".", "-", "+" ("apache-2.0", "llama3.1", "openrail++", "other")
LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")
# The JSON files `AutoTokenizer.from_pretrained(folder)` reads: each is checked first, so a damaged one is named
TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                  "vocab.json", "chat_template.json")
# The model folder's JSON files the build reads besides config.json and the weights' index (check_model_folder's)
MODEL_JSON = ("generation_config.json", "training_info.json")
# How many --init-from hops base_model is followed through local folders (a loop of folders ends at the first repeat)
MAX_LINEAGE = 16


def model_tokenizer(model_path: str | Path) -> Path | None:
    """The model folder itself when it holds a tokenizer (the card's `AutoTokenizer.from_pretrained(repo)` needs
    one), else None."""
    return Path(model_path) if has_tokenizer(model_path) else None


def build_stamp(model_path, tokenizer, training_data, datasets, eval_results, repo_id, license, base_model) -> str:
    """Changes when any input file's content or any card setting changes: every regular file of the inputs is
    hashed (a weight rewritten with its size and mtime kept is a new build; a build already reads them all), and
    the versions that generate the folder's code and card (hf-attnres, transformers) count too."""
    import transformers

    from .. import __version__

    digest = hashlib.sha256()
    for path in (model_path, tokenizer, eval_results):
        for file in input_files(path):
            digest.update(f"{file}\0{file_digest(file)}\0".encode())
        digest.update(f"{path}\0".encode())
    digest.update(json.dumps([training_data, datasets, repo_id, license, base_model, __version__,
                              transformers.__version__]).encode())
    return digest.hexdigest()


def file_digest(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def built_digests(folder: Path) -> dict[str, str]:
    """{name: sha256} of every regular file of a built folder but the record: what the reuse checks is still there."""
    folder = Path(folder)
    return {str(file.relative_to(folder)): file_digest(file) for file in input_files(folder)
            if file.name != BUILD_RECORD}


def changed_since_built(output: Path, record: dict) -> list[str]:
    """The files of `output` that differ from what push-to-hub built there (edited, deleted, added), by content."""
    built = record.get("files")
    if not isinstance(built, dict):
        return ["the build record's file list"]
    now = built_digests(output)
    return sorted(name for name in set(built) | set(now) if built.get(name) != now.get(name))


def input_files(path) -> list[Path]:
    """The regular files of an input (a folder, recursively, or a file; a Hub id or None: none). A FIFO, device or
    dangling link is no content: never opened here (the checks that follow name it)."""
    if path is None or not Path(path).exists():
        return []
    if Path(path).is_file():
        return [Path(path)]
    return sorted(f for f in Path(path).rglob("*") if f.is_file())


def previous_build(output: Path) -> str | None:
    """The stamp of an earlier push-to-hub build at `output`, or None (no folder, or not one push-to-hub built)."""
    stamp = build_record(output).get("stamp")
    return stamp if isinstance(stamp, str) else None


def build_record(output: Path) -> dict:
    """The BUILD_RECORD of `output`, or {} (no folder, or not one push-to-hub built)."""
    try:
        record = json.loads((Path(output) / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def build_hub_folder(
    model_path: str | Path,
    output: str | Path,
    tokenizer: str | Path | None = None,
    training_data: str | None = None,
    datasets: list[str] | None = None,
    eval_results: str | Path | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    force: bool = False,
    trust_remote_code: bool = False,
    base_model: str | None = None,
) -> Path:
    """Load a checkpoint (HF-native or Moonshot layout) and write the upload folder atomically; return its path.
    The tokenizer is `tokenizer`, else the model folder's own when it has one; the license `license`, else
    DEFAULT_LICENSE (the record says which: `card_notes`); base_model `base_model`, else the Hub id the folder's
    records name (`find_base_model`), else none, and the card says how to set it. An `output` push-to-hub built
    earlier (its BUILD_RECORD) is reused when built from the same inputs and still holding what it built (both by
    content), rebuilt in place otherwise (the record says why); any other existing folder needs `force`."""
    from transformers import AutoTokenizer

    license_given = license is not None
    license = license if license_given else DEFAULT_LICENSE
    check_license(license)
    tokenizer_flag = "--tokenizer" if tokenizer is not None else f"--model {model_path}: its tokenizer"
    tokenizer = tokenizer if tokenizer is not None else model_tokenizer(model_path)
    stamp = build_stamp(model_path, tokenizer, training_data, datasets, eval_results, repo_id,
                        license if license_given else None, base_model)
    earlier, rebuilt = previous_build(output), None
    if earlier == stamp and not force:
        changed = changed_since_built(output, build_record(output))
        if not changed:
            return Path(output).absolute()
        rebuilt = (f"{output} rebuilt: {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''} changed there "
                   "since push-to-hub built it (the upload is what a build writes)")
    force = force or earlier is not None  # our own earlier build (a dry run), from other inputs: replaced
    inputs = [p for p in (model_path, tokenizer, eval_results) if p is not None and Path(p).exists()]
    output = check_output(output, force, inputs=inputs, flag="--output")
    try:
        check_model_folder(model_path, "--model")
        finite_weights.check_folder(model_path)  # a NaN weight is named, never published
        check_json_files(model_path, MODEL_JSON, "model file")
        if tokenizer is not None:
            check_tokenizer_source(tokenizer)
            check_json_files(tokenizer, TOKENIZER_JSON, "tokenizer file")
        info = read_training_info(model_path)
    except (CheckpointFileError, NonFiniteWeightsError) as error:
        raise ConversionError(str(error)) from None
    if repo_id is not None:
        check_repo_id(repo_id)
    if base_model is not None:
        check_repo_id(base_model, "--base-model")
    for dataset in datasets or []:
        check_repo_id(dataset, "--dataset", owner=False)  # the Hub's legacy datasets have no owner ("squad")
    evaluation = read_eval_results(eval_results) if eval_results else None
    found, source = (base_model, "--base-model") if base_model else find_base_model(model_path)
    model, family = load_model(model_path)
    with output_folder(output) as folder:
        if tokenizer is not None:
            trust = load_kwargs(tokenizer, trust_remote_code)  # a tokenizer carrying code: refused unless asked
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), **trust)
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:  # transformers' many kinds
                reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise ConversionError(f"{tokenizer_flag} {tokenizer} does not load as a tokenizer "
                                      f"({type(error).__name__}: {reason})") from None
        # HF-native names (no reverse mapping): the Hub copy loads without any conversion
        write_model(model, folder, tokenizer, save_original_format=False)
        trained_on = training_data or training_data_of(info)
        card = model_card(model, family, repo_id or output.name, trained_on, datasets, evaluation, license, found,
                          base_model_unknown=None if found else source)
        card.save(folder / "README.md")
        (folder / BUILD_RECORD).write_text(json.dumps({
            "stamp": stamp, "license": license, "license_given": license_given, "base_model": found,
            "base_model_source": source, "training_data_stated": bool(trained_on), "rebuilt": rebuilt,
            "files": built_digests(folder)}))
        move_into_place(folder, output, replace=force)
    return output


def card_notes(folder: str | Path) -> list[str]:
    """What the built card says of its license and base_model, and where each came from: the lines push-to-hub
    prints after the build (a default or a missing base_model is never left for the reader of the card to find)."""
    record = build_record(folder)
    if not record:
        return []
    rebuilt = [f"note: {record['rebuilt']}"] if isinstance(record.get("rebuilt"), str) else []
    license = record.get("license")
    lines = [f"license: {license} (--license)" if record.get("license_given") else
             f"license: {license} (the default: pass --license to set another, e.g. the base model's own)"]
    if record.get("base_model"):
        lines.append(f"base_model: {record['base_model']} (from {record.get('base_model_source')})")
    else:
        lines.append(f"note: base_model unknown ({record.get('base_model_source')}): the card says so; pass "
                     "--base-model OWNER/NAME, the Hub model this one was converted or fine-tuned from, to set it")
    if record.get("training_data_stated") is False:
        lines.append("note: the card's training data reads \"Not stated.\": pass --training-data TEXT (train's final/ "
                     "folder states it in its training_info.json)")
    return rebuilt + lines


def check_license(license: str) -> None:
    """A Hub license identifier (the Hub refuses a card whose license it does not know), checked before any work."""
    if not isinstance(license, str) or not LICENSE_ID.fullmatch(license):
        raise ConversionError(f"--license {license!r} is not a Hub license identifier (lowercase letters, digits, "
                              "'.', '-', '+': e.g. apache-2.0, mit, llama3.1, other)")


def check_tokenizer_source(tokenizer) -> None:
    """--tokenizer is a folder holding tokenizer files or a Hub id; anything else is named before any work (a file,
    a missing path, a folder without them: transformers would take each for a repository id, or fail vaguely)."""
    path = Path(tokenizer)
    if path.is_dir():
        if not has_tokenizer(path):
            raise ConversionError(f"--tokenizer {tokenizer}: a folder without tokenizer files (any of "
                                  f"{', '.join(TOKENIZER_FILES)})")
    elif os.path.lexists(path):
        raise ConversionError(f"--tokenizer {tokenizer}: a file, not a tokenizer folder or a Hub id (give the folder "
                              "that holds it)")
    else:
        try:
            check_repo_id(str(tokenizer), "--tokenizer", owner=False)
        except ConversionError:
            raise ConversionError(f"--tokenizer {tokenizer}: no such folder, and not a Hub repository id") from None


def check_json_files(folder, names, what: str) -> None:
    """Each of the JSON files `names` in `folder` that exists read as a JSON object first, so a damaged one (or a
    link to some other file) is named (CheckpointFileError), not left to the library that reads it later (the
    tokenizer's bare `Expecting value`, a generation config's TypeError); a FIFO or device in its place is refused
    unopened. A `folder` that is no folder (a tokenizer's Hub id) is transformers' to fetch."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for name in names:
        path = folder / name
        if os.path.lexists(path) and not path.is_file():
            raise CheckpointFileError(f"{path}: not a regular file ({what} expected)")
        if path.is_file():
            read_json_file(path, what)


def read_training_info(model_path) -> dict:
    """The model folder's training_info.json (written by `attnres train`), or {} when there is none (the card then
    says what it was told, or "Not stated"); one that cannot be read is named (CheckpointFileError)."""
    path = Path(model_path) / "training_info.json"
    if not os.path.lexists(path):
        return {}
    return read_json_file(path, "training_info.json")


def training_data_of(info: dict) -> str | None:
    """The card's "Training data" from training_info.json: the tokens, steps and batch, the corpus and its
    fingerprint."""
    if not isinstance(info.get("tokens_trained"), int) or not info.get("data"):
        return None
    text = (f"{info['tokens_trained']:,} tokens ({info.get('steps')} steps x {info.get('global_batch')} sequences x "
            f"{info.get('seq_len')} tokens) of the prepared corpus `{Path(str(info['data'])).name}`")
    fingerprint = info.get("data_fingerprint")
    return text + (f" (data fingerprint `{fingerprint}`)" if fingerprint else "") + ", from training_info.json."


def find_base_model(model_path) -> tuple[str | None, str]:
    """(the Hub id of the model `model_path` was made from, where it was found), or (None, what was looked at).
    Followed through local folders: training's --init-from (training_info.json) when it is a Hub id, else the
    config's `_name_or_path` when it is one, else the --init-from folder's own records, up to MAX_LINEAGE hops."""
    folder, seen = Path(model_path), []
    for _ in range(MAX_LINEAGE):
        if folder.resolve() in seen:
            break
        seen.append(folder.resolve())
        info = optional_json(folder / "training_info.json")
        settings = info.get("settings") if isinstance(info.get("settings"), dict) else {}
        init_from = settings.get("init_from")
        if hub_id(init_from):
            return init_from, f"training_info.json's init_from in {folder}"
        name = optional_json(folder / "config.json").get("_name_or_path")
        if hub_id(name):
            return name, f"config.json's _name_or_path in {folder}"
        if not isinstance(init_from, str) or not Path(init_from).is_dir():
            break
        folder = Path(init_from)
    folders = ", ".join(str(f) for f in seen)
    return None, f"no Hub id in the training_info.json or config.json of {folders}"


def optional_json(path: Path) -> dict:
    """A record that only hints (an --init-from folder's, a config's `_name_or_path`): its object, or {} when it is
    absent, unreadable or no object (never a FIFO opened: regular files only)."""
    try:
        value = loads_limited(path.read_bytes()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def hub_id(value) -> bool:
    """Whether `value` names a Hub repository (owner/name) and not a local path."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not isinstance(value, str) or value.count("/") != 1 or Path(value).exists():
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def load_model(model_path):
    """(the checkpoint as its family's AttnRes model, Kimi Linear's Moonshot fields dropped; its family, resolved
    here once for the whole build); ConversionError naming a family's own standard checkpoint or an unsupported
    one."""
    try:
        family, model_type = family_of_folder(model_path)
    except ValueError as error:  # check_model_folder has named a missing or damaged config.json already
        raise ConversionError(f"--model {model_path}: {error}") from None
    if family != "kimi_linear" and model_type == family:
        raise ConversionError(f"--model {model_path} is the family's own {family} checkpoint, without AttnRes: upcycle "
                              f"it first (attnres convert {model_path} OUT --upcycle block), or publish it with "
                              "transformers")
    model = load_model_folder(model_path, model_class=family_classes(family)[1])
    if family == "kimi_linear":
        drop_moonshot_fields(model.config)
    return model, family


def check_repo_id(repo_id: str, flag: str = "--repo-id", owner: bool = True) -> None:
    """huggingface_hub's own rule for repository ids, applied before any work (the upload would reject it last);
    `owner`: the id must name one (user/name)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        if repo_id.count("/") != 1 and (owner or repo_id.count("/") > 1):
            raise HFValidationError("expected the form user/name or organization/name")
    except HFValidationError as error:
        raise ConversionError(f"{flag} {repo_id!r} is not a valid Hub repository id: {error}") from None


def model_card(model, family, title, training_data, datasets, evaluation, license, base_model=None,
               base_model_unknown: str | None = None) -> ModelCard:
    """The card of `model` of `family` (Kimi Linear's describes KDA/MLA layers and MoE; the other families' a plain
    decoder). Without `base_model`, a "Base model" section says it is not recorded (`base_model_unknown`: what was
    looked at) and how to set it, so a missing base_model reads as unknown, not as trained from scratch."""
    data = ModelCardData(
        base_model=base_model,
        library_name="transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=["attnres", "attention-residuals", family, "custom_code"],
        datasets=datasets or None,
    )
    architecture = ("Kimi Linear (KDA + MLA hybrid, MoE)" if family == "kimi_linear"
                    else f"{type(model).__name__.removesuffix('AttnResForCausalLM')} (transformers' own decoder)")
    sections = [
        f"# {title}",
        f"{architecture} with Attention Residuals: each sub-layer reads the depth stream through a learned softmax "
        "over earlier outputs instead of a fixed residual sum.",
        "## Architecture\n\n" + markdown_table(("", ""), architecture_rows(model, family)),
        "## Training data\n\n" + (training_data or "Not stated."),
    ]
    if not base_model:
        sections.append("## Base model\n\nNot recorded" + (f" ({base_model_unknown})" if base_model_unknown else "")
                        + ". Rebuild the card with `attnres push-to-hub --base-model OWNER/NAME` to name the model "
                        "this one was converted or fine-tuned from.")
    if evaluation:
        sections.append("## Evaluation\n\n" + markdown_table(("Task", "Metric", "Value"), evaluation))
    sections.append(usage(title, model))
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def architecture_rows(model, family: str) -> list[tuple]:
    config = model.config
    kinds = getattr(config, "layer_types", None) or []  # Kimi Linear: KDA or MLA per layer
    mode = config.attn_res_mode
    if mode == "block":
        attn_res = "Block AttnRes, " + block_layout(config.num_hidden_layers, config.attn_res_block_size)
    else:
        attn_res = {"full": "Full AttnRes (every sub-layer output is a source)",
                    "standard": "none (standard residual)"}[mode]
    if getattr(config, "attn_res_gated_read", False):
        attn_res += "; each sub-layer reads the standard stream plus a gated AttnRes mix (the gated read)"
    attn_res_params = sum(p.numel() for n, p in model.named_parameters() if "_res_" in n)
    layers = [("Decoder layers", f"{config.num_hidden_layers} ({kinds.count('linear_attention')} KDA, "
                                 f"{kinds.count('full_attention')} MLA)"),
              ("MoE", f"{config.num_local_experts} experts, {config.num_experts_per_tok} active per token, "
                      f"{config.mlp_layer_types.count('dense')} dense layer(s)")] if family == "kimi_linear" else [
        ("Decoder layers", f"{config.num_hidden_layers} ({config.num_attention_heads} attention heads, "
                           f"{config.num_key_value_heads} key/value heads, MLP width {config.intermediate_size})")]
    return [
        ("Model", f"`{type(model).__name__}` (model_type `{config.model_type}`)"),
        ("AttnRes mode", f"`{mode}`"),
        ("AttnRes", attn_res),
        *layers,
        ("Hidden size / vocabulary", f"{config.hidden_size} / {config.vocab_size}"),
        ("Parameters", f"{model.num_parameters():,} (AttnRes: {attn_res_params:,})"),
    ]


EVAL_FORMATS = ("expected compare's report.json, lm-eval's results JSON, or {task: {metric: value}} / "
                "{task: value}")


def read_eval_results(path: str | Path) -> list[tuple]:
    """Rows (task, metric, value) from eval/compare.py's report.json, lm-eval's results JSON, or a plain
    {task: {metric: value}} / {task: value}. Anything else (a config.json, a training record) is refused, naming
    the file and the first entry that is no metric: its numbers would otherwise read as scores."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_file():  # a folder, FIFO or device: never opened
        raise ConversionError(f"--eval-results {path}: not a regular file (an evaluation results JSON expected)")
    try:
        results = read_json_file(path, "evaluation results file")
    except CheckpointFileError as error:
        raise ConversionError(f"--eval-results {error}") from None
    if "tasks" in results and "models" in results:
        from .card import report_rows

        try:
            rows = report_rows(results)
        except ValueError as error:
            raise ConversionError(f"--eval-results {path}: not a compare report.json: {error}") from None
    else:
        try:
            rows = lm_eval_rows(results["results"]) if "results" in results else plain_rows(results)
        except ValueError as error:
            raise ConversionError(f"--eval-results {path}: not an evaluation result: {error}; {EVAL_FORMATS}") from None
    if not rows:
        raise ConversionError(f"--eval-results {path}: no numeric metrics found")
    return rows


def lm_eval_rows(results) -> list[tuple]:
    """lm-eval's `results`: {task: {"metric,filter": value, "metric_stderr,filter": ..., "alias": ...}}; its other
    numbers (sample_len, ...) have no filter: counts, not metrics. ValueError naming the entry that is no task."""
    if not isinstance(results, dict):
        raise ValueError(f"'results' is {type(results).__name__}, not an object of tasks")
    rows = []
    for task, metrics in sorted(results.items()):
        if not isinstance(metrics, dict):
            raise ValueError(f"results.{task} is {type(metrics).__name__}, not an object of metrics")
        for metric, value in metrics.items():
            if "," in metric and "stderr" not in metric and metric_value(value, f"results.{task}.{metric}", False):
                rows.append((task, metric.split(",")[0], f"{value:.4g}"))
    return rows


def plain_rows(results: dict) -> list[tuple]:
    """{task: value} or {task: {metric: value}} (an "alias" string aside): every entry a score, so a file of other
    numbers and words (a config.json: `model_type`, `architectures`) is refused at its first entry that is none."""
    rows = []
    for task, metrics in sorted(results.items()):
        if not isinstance(metrics, dict):
            metric_value(metrics, task)
            rows.append((task, "score", f"{metrics:.4g}"))
            continue
        for metric, value in metrics.items():
            if metric == "alias" and isinstance(value, str):
                continue
            if metric_value(value, f"{task}.{metric}") and "stderr" not in metric:
                rows.append((task, metric.split(",")[0], f"{value:.4g}"))
        if not metrics:
            raise ValueError(f"{task} holds no metric")
    return rows


def metric_value(value, where: str, strict: bool = True) -> bool:
    """Whether `value` is a metric value (a finite number, not a boolean). Not one: ValueError naming `where` when
    `strict`, else False (lm-eval's words and "N/A" standard errors are skipped). A NaN or infinity is refused either
    way: a card never shows one as a score."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if strict:
            raise ValueError(f"{where} is {type(value).__name__} {json.dumps(value)[:40]}, not a metric value")
        return False
    if not math.isfinite(value):
        raise ValueError(f"{where} is {value}, not a score")
    return True


def markdown_table(header: tuple, rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def block_layout(num_layers: int, block_size: int) -> str:
    """The blocks as they are (hf_attnres.core.depth_layout: consecutive blocks of `block_size` layers, the last one
    shorter when the size does not divide the depth): "8 blocks: 7 of 4 layers and 1 of 2"."""
    full, rest = divmod(num_layers, block_size)
    if rest == 0:
        return f"{full} blocks of {block_size} layers"
    return f"{full + 1} blocks: {full} of {block_size} layers and 1 of {rest}"


def usage(repo_id: str, model) -> str:
    """How the folder loads, the same text for every family: by its own code, or by the installed package's."""
    model_class = type(model).__name__
    names = code_file_names(type(model).__module__)
    files = ", ".join(f"`{name}`" for name in names)
    return (
        "## Usage\n\n"
        f"The model code ships in this repository as {len(names)} files generated from the hf-attnres package "
        f"({files}, loaded with `trust_remote_code=True`) and needs only `torch` and "
        f"`transformers{TRANSFORMERS_RANGE}` (the range it was generated for: under another transformers it refuses to "
        "load, in one line). With `triton` "
        "installed, the fused AttnRes kernels run on CUDA tensors; elsewhere their PyTorch reference does.\n\n"
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}", trust_remote_code=True)  # {model_class}\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)\n'
        "```\n\n"
        "Where the hf-attnres package is installed, the model also loads without `trust_remote_code` after `import "
        f"hf_attnres`, which registers `{model_class}` with the Auto classes: the package's code, not the repository's."
    )


def upload_folder(folder: str | Path, repo_id: str, private: bool = False, commit_message: str | None = None) -> str:
    """Create the repository if needed and upload the built folder; return the commit URL."""
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    commit = api.upload_folder(
        repo_id=repo_id, folder_path=str(folder), commit_message=commit_message or "Upload AttnRes model",
        ignore_patterns=[BUILD_RECORD],  # local bookkeeping, not part of the model
    )
    return str(commit)
