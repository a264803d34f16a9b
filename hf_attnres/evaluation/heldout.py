"""Held-out loss and bits per byte of a model on the validation split written by scripts/prepare_data.py.

Loss is the mean next-token negative log-likelihood (nats/token), as scripts/train.py's validation loss. Bits per byte
divides the summed NLL by ln(2) and by the UTF-8 bytes of the predicted text, so it compares models with different
tokenizers. Each packed sequence is one item of the paired test. Instruction data (a `loss_mask` column) is scored on
the supervised tokens only, as training's `val/heldout_loss`: the prompts are context, not predictions.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from ..utils.trust import load_kwargs


def load_model(model_dir: Path, device: str | None = None, dtype: torch.dtype = torch.float32,
               trust_remote_code: bool = False):
    """Any folder `from_pretrained` reads; code the folder carries runs only with `trust_remote_code`
    (hf_attnres.utils.trust:
    our saved folders load through the registered classes without it)."""
    from transformers import AutoModelForCausalLM

    import hf_attnres  # noqa: F401  registers the AttnRes classes with the Auto classes

    from ..folders.model_folder import load as load_model_folder

    kwargs = load_kwargs(model_dir, trust_remote_code)
    model = load_model_folder(str(model_dir), model_class=AutoModelForCausalLM, dtype=dtype, **kwargs)
    return model.to(device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()


def sequence_nll(model, ids: torch.Tensor, scored: torch.Tensor | None = None) -> torch.Tensor:
    """Summed NLL (nats) of tokens 1..T-1 of each row of `ids` given the tokens before it: shape (batch,). `scored`
    (bool, the shape of `ids`): only the tokens where it is True count (a loss mask)."""
    logits = model(input_ids=ids).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    if scored is not None:
        logprobs = logprobs * scored[:, 1:]
    return -logprobs.sum(dim=1)


def predicted_bytes(tokenizer, ids: torch.Tensor, scored: torch.Tensor | None = None) -> list[int]:
    """UTF-8 bytes of the text each row predicts (tokens 1..T-1), decoded as one string per row; with `scored`, each
    run of consecutive scored tokens is decoded as one string (an assistant turn) and the runs' bytes add up."""
    if scored is None:
        return [len(tokenizer.decode(row[1:].tolist()).encode("utf-8")) for row in ids]
    sizes = []
    for row, keep in zip(ids.tolist(), scored.tolist()):
        runs, run = [], []
        for token, kept in zip(row[1:], keep[1:]):
            if kept:
                run.append(token)
            elif run:
                runs, run = runs + [run], []
        sizes.append(sum(len(tokenizer.decode(r).encode("utf-8")) for r in runs + ([run] if run else [])))
    return sizes


def check_tokenizer(model_dir: Path, data_dir: Path) -> None:
    """The model must read the corpus's token ids: refuse a model saved with another tokenizer."""
    mine, theirs = Path(model_dir) / "tokenizer.json", Path(data_dir) / "tokenizer" / "tokenizer.json"
    if mine.is_file() and theirs.is_file() and mine.read_bytes() != theirs.read_bytes():
        raise ValueError(f"{model_dir}: its tokenizer differs from the one in {data_dir}/tokenizer; "
                         "held-out metrics need the corpus the model was trained on")


@torch.no_grad()
def heldout_metrics(model_dir, data_dir, *, max_sequences: int | None = None, batch_size: int = 8,
                    device: str | None = None, model=None, progress: bool = True,
                    trust_remote_code: bool = False) -> dict:
    """Validation loss and bits per byte of `model_dir` on `data_dir` (a scripts/prepare_data.py folder).

    Returns {"loss", "bpb", "tokens", "bytes", "sequences", "split_sequences", "scored", "items": [per-sequence
    bpb], "item_loss": [...]}; `scored` says which tokens count (every token, or the loss mask's). A sequence with no
    scored token is no item (its `items` entry is NaN, and it adds nothing to the pooled numbers).
    `model` skips loading (an already loaded model of `model_dir`); `trust_remote_code`: see hf_attnres.utils.trust.
    """
    from tqdm.auto import tqdm

    from ..training.data import check_prepared, load_prepared

    check_prepared(Path(data_dir))
    check_tokenizer(model_dir, data_dir)
    _, val_set, tokenizer = load_prepared(Path(data_dir))
    model = model if model is not None else load_model(model_dir, device, trust_remote_code=trust_remote_code)
    device = next(model.parameters()).device
    count = len(val_set) if max_sequences is None else min(max_sequences, len(val_set))
    if count == 0:
        raise ValueError(f"{data_dir}: the validation split is empty")
    masked = "loss_mask" in val_set.column_names
    item_nll, item_bytes, item_tokens = [], [], []
    for start in tqdm(range(0, count, batch_size), desc=f"held-out {Path(model_dir).name}", disable=not progress):
        rows = val_set[start : min(start + batch_size, count)]
        ids = rows["input_ids"].to(device)
        scored = (rows["loss_mask"] != 0).to(device) if masked else None
        item_nll += sequence_nll(model, ids, scored).tolist()
        item_bytes += predicted_bytes(tokenizer, ids.cpu(), None if scored is None else scored.cpu())
        item_tokens += ([ids.shape[1] - 1] * ids.shape[0] if scored is None else scored[:, 1:].sum(1).tolist())
    tokens, nbytes = sum(item_tokens), sum(item_bytes)
    if tokens == 0 or nbytes == 0:
        raise ValueError(f"{data_dir}: the first {count} validation sequences hold no token its loss_mask scores")
    nan = float("nan")
    return dict(
        loss=math.fsum(item_nll) / tokens,
        bpb=math.fsum(item_nll) / math.log(2) / nbytes,
        tokens=tokens, bytes=nbytes, sequences=count, split_sequences=len(val_set),
        scored="supervised tokens (loss_mask)" if masked else "every token",
        items=[nll / math.log(2) / b if b else nan for nll, b in zip(item_nll, item_bytes)],
        item_loss=[nll / t if t else nan for nll, t in zip(item_nll, item_tokens)],
    )
