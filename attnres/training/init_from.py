"""`train.py --init-from DIR`: fine-tune an existing model. DIR is anything `from_pretrained` reads: train.py's
final/ or a checkpoint's model, our HF-native format, Moonshot's layout, or a Kimi Linear checkpoint upcycled with
`scripts/convert_checkpoint.py --upcycle`. The weights (and DIR's tokenizer, when it has one) come from DIR; the
optimizer and schedule start fresh. The AttnRes mode is DIR's, unless --attn-res / --block-size change it to another
mode with the same tensors (block <-> full, another block size); standard <-> AttnRes needs a conversion first."""
from __future__ import annotations

import json
from pathlib import Path

from ..configuration_attnres import KimiLinearAttnResConfig

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def check_init_from(args) -> None:
    """Flag conflicts and a missing folder, before any work (ValueError naming the flag)."""
    if args.init_from is None:
        args.model_size = args.model_size or "small"
        return
    if args.config is not None or args.model_size is not None:
        flag = "--config" if args.config is not None else "--model-size"
        raise ValueError(f"--init-from {args.init_from} takes the model (size and config) from that folder: drop {flag}")
    folder = Path(args.init_from)
    if not (folder / "config.json").is_file():
        raise ValueError(f"--init-from {args.init_from}: no config.json there (a folder written by save_pretrained, "
                         f"train.py's final/, or scripts/convert_checkpoint.py)")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--init-from {folder}: config.json is not valid UTF-8 JSON ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--init-from {folder}: config.json is not a JSON object")
    if not any(folder.glob("*.safetensors")):
        raise ValueError(f"--init-from {folder}: no weights (*.safetensors) there")


def init_config(init_from: Path, attn_res: str | None, block_size: int | None, tokenizer) -> KimiLinearAttnResConfig:
    """DIR's config, with the AttnRes mode kept or changed consistently; raises ValueError naming the flag."""
    try:
        config = KimiLinearAttnResConfig.from_pretrained(str(init_from))
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"--init-from {init_from}: cannot read its config.json ({error})") from error
    saved, mode = config.attn_res_mode, attn_res or config.attn_res_mode
    if (saved == "standard") != (mode == "standard"):
        hint = (f"upcycle it first: python scripts/convert_checkpoint.py {init_from} OUT --upcycle {mode}"
                if saved == "standard" else "a model trained with AttnRes cannot drop its mixes")
        raise ValueError(f"--init-from {init_from} is a {saved}-residual model; --attn-res {mode} needs other tensors: {hint}")
    size = block_size if block_size is not None else config.attn_res_block_size
    if mode == "block" and not size:
        raise ValueError(f"--init-from {init_from} is a {saved} model: --attn-res block needs --block-size")
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"--init-from {init_from}: the tokenizer has {len(tokenizer)} tokens, more than the model's "
                         f"vocab_size {config.vocab_size}")
    fields = dict(config.to_dict(), attn_res_mode=mode, attn_res_block_size=size if mode == "block" else 0)
    try:
        return KimiLinearAttnResConfig(**fields)
    except (ValueError, TypeError) as error:
        raise ValueError(f"--init-from {init_from}: invalid model config: {error}") from error


def init_tokenizer(init_from: Path, data_tokenizer, data_dir: Path):
    """DIR's tokenizer when DIR has one (it must be the one the data was prepared with), else the data's."""
    from transformers import AutoTokenizer

    from .tokenizer import with_pad_token

    if not any((Path(init_from) / name).is_file() for name in TOKENIZER_FILES):
        return data_tokenizer
    try:
        tokenizer = with_pad_token(AutoTokenizer.from_pretrained(str(init_from)))
    except Exception as error:  # tokenizers raises a bare Exception for a damaged tokenizer.json
        raise ValueError(f"--init-from {init_from}: cannot read its tokenizer ({type(error).__name__}: "
                         f"{str(error)[:300]})") from None
    if tokenizer.get_vocab() != data_tokenizer.get_vocab():
        raise ValueError(f"--data {data_dir} was tokenized with another tokenizer than --init-from {init_from}'s; "
                         f"prepare it with: python scripts/prepare_data.py --tokenizer {init_from} ...")
    if data_tokenizer.chat_template and data_tokenizer.chat_template != tokenizer.chat_template:
        tokenizer.chat_template = data_tokenizer.chat_template  # the template the instruction data was rendered with
    return tokenizer


def load_model(init_from: Path, config: KimiLinearAttnResConfig):
    import torch

    from ..modeling_attnres import KimiLinearAttnResForCausalLM

    # fp32 master weights, as a fresh model has: --mixed-precision decides the compute dtype
    return KimiLinearAttnResForCausalLM.from_pretrained(str(init_from), config=config, dtype=torch.float32)
