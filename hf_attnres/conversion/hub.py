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

import json
from pathlib import Path

from huggingface_hub import HfApi, ModelCard, ModelCardData

from ..core.versions import TRANSFORMERS_RANGE
from ..families.registry import family_classes
from ..folders.checkpoint_files import CheckpointFileError, check_model_folder
from ..folders.model_family import family_of_folder
from ..folders.model_folder import load as load_model_folder
from ..folders.model_folder import write_model
from ..folders.remote_code import code_file_names
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from ..utils.tokenizer_files import has_tokenizer
from ..utils.trust import load_kwargs
from .atomic import move_into_place, output_folder
from .config import drop_moonshot_fields
from .errors import ConversionError
from .guards import check_output

# A folder push-to-hub built holds this record of what it was built from: a later run with the same inputs reuses it
# (the upload after a --dry-run), other inputs rebuild it in place; a folder without it is not ours and is refused.
BUILD_RECORD = ".attnres_hub_build.json"


def model_tokenizer(model_path: str | Path) -> Path | None:
    """The model folder itself when it holds a tokenizer (the card's `AutoTokenizer.from_pretrained(repo)` needs
    one), else None."""
    return Path(model_path) if has_tokenizer(model_path) else None


def build_stamp(model_path, tokenizer, training_data, datasets, eval_results, repo_id, license, base_model) -> str:
    """Changes when any input file or card setting changes (file sizes and mtimes: no hash of gigabytes)."""
    import hashlib

    digest = hashlib.sha256()
    for path in (model_path, tokenizer, eval_results):
        files = sorted(Path(path).rglob("*")) if path is not None and Path(path).is_dir() else (
            [Path(path)] if path is not None and Path(path).is_file() else [])
        for file in (f for f in files if f.is_file()):
            stat = file.stat()
            digest.update(f"{file}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
        digest.update(f"{path}\0".encode())
    digest.update(json.dumps([training_data, datasets, repo_id, license, base_model]).encode())
    return digest.hexdigest()


def previous_build(output: Path) -> str | None:
    """The stamp of an earlier push-to-hub build at `output`, or None (no folder, or not one push-to-hub built)."""
    try:
        record = json.loads((Path(output) / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get("stamp") if isinstance(record, dict) and isinstance(record.get("stamp"), str) else None


def build_hub_folder(
    model_path: str | Path,
    output: str | Path,
    tokenizer: str | Path | None = None,
    training_data: str | None = None,
    datasets: list[str] | None = None,
    eval_results: str | Path | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
    force: bool = False,
    trust_remote_code: bool = False,
    base_model: str | None = None,
) -> Path:
    """Load a checkpoint (HF-native or Moonshot layout) and write the upload folder atomically; return its path.
    The tokenizer is `tokenizer`, else the model folder's own when it has one. An `output` push-to-hub built earlier
    (its BUILD_RECORD) is reused when built from the same inputs, rebuilt in place otherwise; any other existing
    folder needs `force`."""
    from transformers import AutoTokenizer

    tokenizer = tokenizer if tokenizer is not None else model_tokenizer(model_path)
    stamp = build_stamp(model_path, tokenizer, training_data, datasets, eval_results, repo_id, license, base_model)
    earlier = previous_build(output)
    if earlier == stamp and not force:
        return Path(output).absolute()
    force = force or earlier is not None  # our own earlier build (a dry run), from other inputs: replaced
    inputs = [p for p in (model_path, tokenizer, eval_results) if p is not None and Path(p).exists()]
    output = check_output(output, force, inputs=inputs, flag="--output")
    try:
        check_model_folder(model_path, "--model")
        finite_weights.check_folder(model_path)  # a NaN weight is named, never published
    except (CheckpointFileError, NonFiniteWeightsError) as error:
        raise ConversionError(str(error)) from None
    if repo_id is not None:
        check_repo_id(repo_id)
    if base_model is not None:
        check_repo_id(base_model, "--base-model")
    evaluation = read_eval_results(eval_results) if eval_results else None
    info = read_training_info(model_path)
    model, family = load_model(model_path)
    with output_folder(output) as folder:
        if tokenizer is not None:
            trust = load_kwargs(tokenizer, trust_remote_code)  # a tokenizer carrying code: refused unless asked
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), **trust)
        # HF-native names (no reverse mapping): the Hub copy loads without any conversion
        write_model(model, folder, tokenizer, save_original_format=False)
        base_model = base_model or base_model_of(info)
        card = model_card(model, family, repo_id or output.name, training_data or training_data_of(info), datasets,
                          evaluation, license, base_model)
        card.save(folder / "README.md")
        (folder / BUILD_RECORD).write_text(json.dumps({"stamp": stamp}))
        move_into_place(folder, output, replace=force)
    return output


def read_training_info(model_path) -> dict:
    """The model folder's training_info.json (written by `attnres train`), or {} when absent or unreadable (the
    card then says what it was told, or "Not stated")."""
    try:
        info = json.loads((Path(model_path) / "training_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def training_data_of(info: dict) -> str | None:
    """The card's "Training data" from training_info.json: the tokens, steps and batch, the corpus and its
    fingerprint."""
    if not isinstance(info.get("tokens_trained"), int) or not info.get("data"):
        return None
    text = (f"{info['tokens_trained']:,} tokens ({info.get('steps')} steps x {info.get('global_batch')} sequences x "
            f"{info.get('seq_len')} tokens) of the prepared corpus `{Path(str(info['data'])).name}`")
    fingerprint = info.get("data_fingerprint")
    return text + (f" (data fingerprint `{fingerprint}`)" if fingerprint else "") + ", from training_info.json."


def base_model_of(info: dict) -> str | None:
    """training's --init-from when it names a Hub repository (a local folder is no `base_model`)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    source = (info.get("settings") or {}).get("init_from") if isinstance(info.get("settings"), dict) else None
    if not isinstance(source, str) or source.count("/") != 1 or Path(source).exists():
        return None
    try:
        validate_repo_id(source)
    except HFValidationError:
        return None
    return source


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


def check_repo_id(repo_id: str, flag: str = "--repo-id") -> None:
    """huggingface_hub's own rule for repository ids, applied before any work (the upload would reject it last)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        if repo_id.count("/") != 1:
            raise HFValidationError("expected the form user/name or organization/name")
    except HFValidationError as error:
        raise ConversionError(f"{flag} {repo_id!r} is not a valid Hub repository id: {error}") from None


def model_card(model, family, title, training_data, datasets, evaluation, license, base_model=None) -> ModelCard:
    """The card of `model` of `family` (Kimi Linear's describes KDA/MLA layers and MoE; the other families' a plain
    decoder)."""
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


def read_eval_results(path: str | Path) -> list[tuple]:
    """Rows (task, metric, value) from eval/compare.py's report.json, lm-eval's results JSON, or a plain
    {task: {metric: value}} / {task: value}."""
    path = Path(path)
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConversionError(f"--eval-results {path}: {error}") from error
    if isinstance(results, dict) and "tasks" in results and "models" in results:
        from .card import report_rows

        rows = report_rows(results)
    else:
        # lm-eval names metrics "metric,filter"; its other numbers (sample_len, ...) are counts, not metrics
        lm_eval = isinstance(results, dict) and "results" in results
        rows = []
        for task, metrics in sorted(results.get("results", results).items()):
            if not isinstance(metrics, dict):
                metrics = {"score": metrics}
            for metric, value in metrics.items():
                if isinstance(value, (int, float)) and "stderr" not in metric and ("," in metric or not lm_eval):
                    rows.append((task, metric.split(",")[0], f"{value:.4g}"))
    if not rows:
        raise ConversionError(f"--eval-results {path}: no numeric metrics found")
    return rows


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
