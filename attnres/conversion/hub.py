"""Build the folder that goes to the Hugging Face Hub (weights, config with auto_map, remote code, tokenizer, model
card) and upload it with huggingface_hub."""
from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import HfApi, ModelCard, ModelCardData

from ..core.checkpoint_files import CheckpointFileError, check_model_folder
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from ..utils.trust import load_kwargs
from .atomic import check_output, move_into_place, output_folder
from .config import drop_moonshot_fields
from .errors import ConversionError

INSTALL_NOTE = (
    "The model code ships in this repository as three files generated from the attnres package (the configuration, "
    "`modeling_*_attnres.py` and `kernels_attnres.py`, loaded with `trust_remote_code=True`) and needs only `torch` "
    "and `transformers>=5.23.0,<5.24`. With `triton` installed, "
    "the fused AttnRes kernels run on CUDA tensors; elsewhere their PyTorch reference does."
)


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
) -> Path:
    """Load a checkpoint (HF-native or Moonshot layout) and write the upload folder atomically; return its path."""
    from transformers import AutoTokenizer

    from ..families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM

    inputs = [p for p in (model_path, tokenizer, eval_results) if p is not None and Path(p).exists()]
    output = check_output(output, force, inputs=inputs, flag="--output")
    try:
        check_model_folder(model_path, "--model")
        finite_weights.check_folder(model_path)  # a NaN weight is named, never published
    except (CheckpointFileError, NonFiniteWeightsError) as error:
        raise ConversionError(str(error)) from None
    if repo_id is not None:
        check_repo_id(repo_id)
    evaluation = read_eval_results(eval_results) if eval_results else None
    model = KimiLinearAttnResForCausalLM.from_pretrained(model_path)
    drop_moonshot_fields(model.config)
    with output_folder(output) as folder:
        # HF-native names (no reverse mapping): the Hub copy loads without any conversion
        model.save_pretrained(folder, save_original_format=False)
        if tokenizer is not None:
            trust = load_kwargs(tokenizer, trust_remote_code)  # a tokenizer carrying code: refused unless asked
            AutoTokenizer.from_pretrained(tokenizer, **trust).save_pretrained(folder)
        card = model_card(model, repo_id or output.name, training_data, datasets, evaluation, license)
        card.save(folder / "README.md")
        move_into_place(folder, output, replace=force)
    return output


def check_repo_id(repo_id: str) -> None:
    """huggingface_hub's own rule for repository ids, applied before any work (the upload would reject it last)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        if repo_id.count("/") != 1:
            raise HFValidationError("expected the form user/name or organization/name")
    except HFValidationError as error:
        raise ConversionError(f"--repo-id {repo_id!r} is not a valid Hub repository id: {error}") from None


def model_card(model, title, training_data, datasets, evaluation, license) -> ModelCard:
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=["attnres", "attention-residuals", "kimi_linear", "custom_code"],
        datasets=datasets or None,
    )
    sections = [
        f"# {title}",
        "Kimi Linear (KDA + MLA hybrid, MoE) with Attention Residuals: each sub-layer reads the depth stream through a "
        "learned softmax over earlier outputs instead of a fixed residual sum.",
        "## Architecture\n\n" + markdown_table(("", ""), architecture_rows(model)),
        "## Training data\n\n" + (training_data or "Not stated."),
    ]
    if evaluation:
        sections.append("## Evaluation\n\n" + markdown_table(("Task", "Metric", "Value"), evaluation))
    sections.append(usage(title))
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(sections) + "\n")


def architecture_rows(model) -> list[tuple]:
    config = model.config
    kinds = config.layer_types
    mode = config.attn_res_mode
    if mode == "block":
        attn_res = f"Block AttnRes, {config.attn_res_num_blocks} blocks of {config.attn_res_block_size} layers"
    else:
        attn_res = {"full": "Full AttnRes (every sub-layer output is a source)",
                    "standard": "none (standard residual)"}[mode]
    attn_res_params = sum(p.numel() for n, p in model.named_parameters() if "_res_" in n)
    return [
        ("Model", f"`{type(model).__name__}` (model_type `{config.model_type}`)"),
        ("AttnRes mode", f"`{mode}`"),
        ("AttnRes", attn_res),
        ("Decoder layers", f"{config.num_hidden_layers} ({kinds.count('linear_attention')} KDA, "
                           f"{kinds.count('full_attention')} MLA)"),
        ("MoE", f"{config.num_local_experts} experts, {config.num_experts_per_tok} active per token, "
                f"{config.mlp_layer_types.count('dense')} dense layer(s)"),
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


def usage(repo_id: str) -> str:
    return (
        "## Usage\n\n"
        f"{INSTALL_NOTE}\n\n"
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'model = AutoModelForCausalLM.from_pretrained("{repo_id}", trust_remote_code=True)\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)\n'
        "```\n\n"
        "With `import attnres` the model also loads without `trust_remote_code` "
        "(`attnres.KimiLinearAttnResForCausalLM.from_pretrained`)."
    )


def upload_folder(folder: str | Path, repo_id: str, private: bool = False, commit_message: str | None = None) -> str:
    """Create the repository if needed and upload the built folder; return the commit URL."""
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    commit = api.upload_folder(
        repo_id=repo_id, folder_path=str(folder), commit_message=commit_message or "Upload Kimi Linear AttnRes model"
    )
    return str(commit)
