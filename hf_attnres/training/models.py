"""The model a training run starts from: a size preset (built by `hf_attnres.utils.tiny.tiny_config` in the preset's
family) or a JSON config, with the AttnRes mode and block size from the command line, so a matched baseline is one
flag away; or an existing model to fine-tune (`--init-from DIR`).

`--init-from DIR`: DIR is anything `from_pretrained` reads: train.py's final/ or a checkpoint's model, our HF-native
format, Moonshot's layout, or a Kimi Linear checkpoint upcycled with `scripts/convert_checkpoint.py --upcycle`. The
weights (and DIR's tokenizer, when it has one) come from DIR; the optimizer and schedule start fresh. The AttnRes mode
is DIR's, unless --attn-res / --block-size change it to another mode with the same tensors (block <-> full, another
block size); standard <-> AttnRes needs a conversion first.

Every family (docs/FAMILIES.md): DIR's config.json's `model_type` names it (`hf_attnres.families.registry`), so an
upcycled Llama (`llama_attnres`) trains as Llama with AttnRes. A family's own standard checkpoint (a plain
`LlamaForCausalLM` folder, `model_type` "llama") fine-tunes as it is, with the standard residual: the AttnRes class in
standard mode is the family's model itself, with the same tensors. Block or Full AttnRes from it needs the new
tensors first: `attnres convert DIR OUT --upcycle block`, which the refusal names. From scratch, `--family NAME` builds
a preset (`PRESETS`, typed `SizePreset`s) in that family's own architecture; without --family, the preset's only family
where it has one (k3-small: Kimi Linear), else Llama (`hf_attnres.utils.tiny.DEFAULT_FAMILY`), the dense decoder the
other families extend. A --config file names its family by its `model_type`.

Embedding repair: models whose embedding had a `padding_idx` (Kimi Linear checkpoints, which pass `pad_token_id` as the
padding index) keep the pad token's embedding at exactly zero. When pad is a real token (pad = EOS in most BPE
tokenizers), every position holding it starts from a zero residual stream, and RMSNorm's backward at zero input scales
by 1/sqrt(eps) per layer: a deep model's gradients overflow. Before training such a model on data that contains the
token, its row is re-initialised.
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError

from ..families.registry import SUPPORTED, declaration, family_classes, family_of_model_type
from ..folders.model_family import family_of_folder
from ..folders.model_folder import load as load_model_folder
from ..utils.tiny import (
    DEFAULT_FAMILY,
    K3_SMALL_PRESET,
    TINY_KIMI_LINEAR,
    DenseShape,
    KimiLinearShape,
    SizePreset,
    tiny_config,
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
logger = logging.getLogger(__name__)

# The sizes `--model-size` names, in every family's own decoder (its attention and MLP, its defaults for everything
# else: rotary base, norms, sliding windows, Gemma's scaled embedding); in Kimi Linear, KDA with an MLA layer every
# third position, a dense first MLP, then MoE (`hf_attnres.utils.tiny.hybrid_layer_types`)
PRESETS: dict[str, SizePreset] = {
    "tiny": SizePreset(
        num_layers=4, block_size=2,
        dense=DenseShape(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2),
        kimi_linear=replace(TINY_KIMI_LINEAR, num_key_value_heads=4),
    ),
    "small": SizePreset(
        num_layers=8, block_size=2,
        dense=DenseShape(hidden_size=256, intermediate_size=768, num_attention_heads=4, num_key_value_heads=4),
        kimi_linear=KimiLinearShape(
            moe_intermediate_size=128, num_local_experts=8, num_experts_per_tok=2, kv_lora_rank=64,
            qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=64, linear_num_heads=4, linear_head_dim=64,
        ),
    ),
    "base": SizePreset(
        num_layers=12, block_size=3,
        dense=DenseShape(hidden_size=768, intermediate_size=2048, num_attention_heads=12, num_key_value_heads=12),
        kimi_linear=KimiLinearShape(
            moe_intermediate_size=384, num_local_experts=16, num_experts_per_tok=2, kv_lora_rank=256,
            qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, linear_num_heads=12, linear_head_dim=64,
        ),
    ),
    "k3-small": K3_SMALL_PRESET,  # Kimi K3's text architecture (SiTU, latent MoE, ...): `attnres export --to k3`
}
FAMILIES = tuple(SUPPORTED)


def preset_family(model_size: str, family: str | None) -> str:
    """The family a from-scratch preset is built in: --family's; else the preset's only one (k3-small is Kimi
    Linear's); else `DEFAULT_FAMILY` (Llama). ValueError naming the flags when the preset is not built in --family."""
    preset = PRESETS[model_size]
    if family is None:
        return preset.families[0] if len(preset.families) == 1 else DEFAULT_FAMILY
    if family not in preset.families:
        built_in = " and ".join(declaration(name).title for name in preset.families)
        raise ValueError(f"--model-size {model_size} is {built_in}'s only: --family {family} takes "
                         f"{', '.join(name for name, size in PRESETS.items() if family in size.families)}")
    return family


def build_config(model_size: str, config_file: Path | None, attn_res: str | None, block_size: int | None,
                 tokenizer, family: str | None = None):
    """The model config; raises ValueError naming the file / field when it is invalid. `family`: --family (None: a
    --config file's own model_type names it, a preset its only family, else `DEFAULT_FAMILY`, Llama)."""
    special = dict(pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id)
    if config_file is not None:
        config_class = family_classes(_file_family(config_file, family))[0]
        try:
            fields = config_class.from_json_file(str(config_file)).to_dict()
        except (OSError, ValueError, TypeError, StrictDataclassError) as error:
            raise ValueError(f"--config {config_file}: {error}") from error
        mode = attn_res or fields.get("attn_res_mode") or "block"
        size = block_size if block_size is not None else fields.get("attn_res_block_size") or 0
        fields.update(attn_res_mode=mode, attn_res_block_size=size if mode == "block" else 0)
        if fields["vocab_size"] < len(tokenizer):
            raise ValueError(f"--config {config_file}: vocab_size {fields['vocab_size']} "
                             f"< tokenizer size {len(tokenizer)}")
        return _checked(lambda: config_class(**fields), f"--config {config_file}")
    family = preset_family(model_size, family)
    preset = PRESETS[model_size]
    mode = attn_res or "block"
    size = block_size if block_size is not None else preset.block_size
    return _checked(lambda: tiny_config(mode, size, preset.num_layers, family=family, vocab_size=len(tokenizer),
                                        **special, **preset.fields(family)),
                    f"--family {family} --model-size {model_size}")


def _file_family(config_file: Path, family: str | None) -> str:
    """The family of a --config file: its model_type's, else --family's, else `DEFAULT_FAMILY` (Llama)."""
    try:
        model_type = json.loads(Path(config_file).read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return family or DEFAULT_FAMILY  # an unreadable file: the config class's own reader names the problem
    if model_type is None:
        return family or DEFAULT_FAMILY
    try:
        found = family_of_model_type(model_type)
    except ValueError as error:
        raise ValueError(f"--config {config_file}: {error}") from None
    if family is not None and family != found:
        raise ValueError(f"--family {family} contradicts --config {config_file}, whose model_type {model_type!r} is "
                         f"{found}: drop --family")
    return found


def model_class_of(config):
    """The causal LM class of an AttnRes config of any family."""
    return family_classes(family_of_model_type(config.model_type))[1]


def _checked(make, origin: str):
    try:
        return make()
    except (ValueError, TypeError, StrictDataclassError) as error:
        raise ValueError(f"{origin}: invalid model config: {error}") from error


# --- --init-from DIR: fine-tuning an existing model ---------------------------------------------------------------


def check_init_from(args) -> None:
    """Flag conflicts and a missing folder, before any work (ValueError naming the flag)."""
    family = getattr(args, "family", None)
    if args.init_from is None:
        args.model_size = args.model_size or "small"
        if args.config is None:
            preset_family(args.model_size, family)
        return
    if args.config is not None or args.model_size is not None or family is not None:
        flag = "--config" if args.config is not None else "--model-size" if args.model_size is not None else \
            "--family"
        raise ValueError(f"--init-from {args.init_from} takes the model (size and config) from that folder: "
                         f"drop {flag}")
    folder = Path(args.init_from)
    if folder.suffix == ".gguf":
        raise ValueError(f"--init-from {args.init_from}: a GGUF file, not a model folder; write its plain folder first "
                         f"with `attnres convert {args.init_from} OUT` and pass --init-from OUT")
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


def init_config(init_from: Path, attn_res: str | None, block_size: int | None, tokenizer):
    """DIR's config, of DIR's family, with the AttnRes mode kept or changed consistently; raises ValueError naming the
    flag."""
    config_class = family_classes(folder_family(init_from))[0]
    try:
        config = _read_init_config(init_from, config_class)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"--init-from {init_from}: cannot read its config.json ({error})") from error
    saved, mode = config.attn_res_mode, attn_res or config.attn_res_mode
    if (saved == "standard") != (mode == "standard"):
        hint = (f"upcycle it first: attnres convert {init_from} OUT --upcycle {mode}"
                if saved == "standard" else "a model trained with AttnRes cannot drop its mixes")
        raise ValueError(f"--init-from {init_from} is a {saved}-residual model; "
                         f"--attn-res {mode} needs other tensors: {hint}")
    size = block_size if block_size is not None else config.attn_res_block_size
    if mode == "block" and not size:
        raise ValueError(f"--init-from {init_from} is a {saved} model: --attn-res block needs --block-size")
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"--init-from {init_from}: the tokenizer has {len(tokenizer)} tokens, more than the model's "
                         f"vocab_size {config.vocab_size}")
    fields = dict(config.to_dict(), attn_res_mode=mode, attn_res_block_size=size if mode == "block" else 0)
    try:
        return config_class(**fields)
    except (ValueError, TypeError) as error:
        raise ValueError(f"--init-from {init_from}: invalid model config: {error}") from error


def _read_init_config(init_from: Path, config_class):
    """DIR's config as an AttnRes config of its family. A family's own checkpoint (`llama`, not `llama_attnres`) is
    read by the family's own config class and carried over field by field in standard mode: reading it with the
    AttnRes class makes transformers warn that a `llama` checkpoint may not suit a `llama_attnres` model, which a
    standard fine-tune of the family's own model never is."""
    family, model_type = family_of_folder(init_from)
    if family == "kimi_linear" or model_type != family:
        return config_class.from_pretrained(str(init_from))
    from transformers import AutoConfig

    plain = AutoConfig.from_pretrained(str(init_from)).to_dict()
    # the fields that name the file's class or where it was read: the digest a resume compares must not see a move
    fields = {key: value for key, value in plain.items()
              if key not in ("model_type", "transformers_version", "_name_or_path")}
    return config_class.from_dict(dict(fields, attn_res_mode="standard", attn_res_block_size=0))


def folder_family(init_from: Path) -> str:
    """The family of DIR's config.json (its model_type: `llama` or `llama_attnres` is Llama; none is Kimi Linear)."""
    try:
        return family_of_folder(init_from)[0]
    except ValueError as error:
        raise ValueError(f"--init-from {init_from}: {error}") from None


def init_tokenizer(init_from: Path, data_tokenizer, data_dir: Path, trust_remote_code: bool = False):
    """DIR's tokenizer when DIR has one (it must be the one the data was prepared with), else the data's."""
    from transformers import AutoTokenizer

    from ..utils.trust import load_kwargs
    from .corpora import with_pad_token

    if not any((Path(init_from) / name).is_file() for name in TOKENIZER_FILES):
        return data_tokenizer
    trust = load_kwargs(init_from, trust_remote_code)  # a folder carrying code is refused here, by name
    try:
        tokenizer = with_pad_token(AutoTokenizer.from_pretrained(str(init_from), **trust))
    except Exception as error:  # tokenizers raises a bare Exception for a damaged tokenizer.json
        raise ValueError(f"--init-from {init_from}: cannot read its tokenizer ({type(error).__name__}: "
                         f"{str(error)[:300]})") from None
    if tokenizer.get_vocab() != data_tokenizer.get_vocab():
        raise ValueError(f"--data {data_dir} was tokenized with another tokenizer than --init-from {init_from}'s; "
                         f"prepare it with: python scripts/prepare_data.py --tokenizer {init_from} ...")
    if data_tokenizer.chat_template and data_tokenizer.chat_template != tokenizer.chat_template:
        tokenizer.chat_template = data_tokenizer.chat_template  # the template the instruction data was rendered with
    return tokenizer


def load_model(init_from: Path, config):
    # fp32 master weights, as a fresh model has: --mixed-precision decides the compute dtype
    return load_model_folder(str(init_from), model_class=model_class_of(config), config=config, dtype=torch.float32)


# --- embedding repair ---------------------------------------------------------------------------------------------


def data_token_ids(dataset, column: str = "input_ids", chunk: int = 4096) -> torch.Tensor:
    """Sorted ids of the tokens that occur in `dataset[column]` (a torch-formatted `datasets` split or any sliceable
    of {column: LongTensor [n, seq]}), read in chunks of rows."""
    seen = torch.zeros(0, dtype=torch.bool)
    for start in range(0, len(dataset), chunk):
        ids = torch.as_tensor(dataset[start : start + chunk][column]).flatten()
        if ids.numel() == 0:
            continue
        if int(ids.max()) >= len(seen):
            seen = torch.cat([seen, seen.new_zeros(int(ids.max()) + 1 - len(seen))])
        seen[ids] = True
    return seen.nonzero().flatten()


@torch.no_grad()
def reinit_zero_embedding_rows(model, token_ids: torch.Tensor, seed: int = 0, log=logger.warning) -> list[int]:
    """Re-initialise the input-embedding rows of `token_ids` that are exactly zero; returns the repaired ids.

    New rows are Gaussian at the median RMS of the used non-zero rows (the init std when there are none), drawn from a
    generator seeded by `seed`: every process of a distributed run repairs identically. `log` gets one note per call
    that repairs anything. The embedding must be materialised (call before ZeRO-3 partitions it).
    """
    weight = model.get_input_embeddings().weight
    token_ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    token_ids = token_ids[(token_ids >= 0) & (token_ids < weight.shape[0])]
    rows = weight[token_ids]
    zero = (rows == 0).all(dim=-1)
    if not zero.any():
        return []
    repaired = token_ids[zero]
    rms = rows[~zero].float().pow(2).mean(-1).sqrt()
    std = float(rms.median()) if rms.numel() else float(model.config.initializer_range)
    generator = torch.Generator().manual_seed(seed)
    fresh = torch.randn(len(repaired), weight.shape[1], generator=generator) * std
    weight[repaired.to(weight.device)] = fresh.to(weight.device, weight.dtype)
    ids = repaired.tolist()
    log(f"re-initialised {len(ids)} all-zero input-embedding row(s) of tokens that occur in the data (ids "
        f"{ids[:10]}{' ...' if len(ids) > 10 else ''}, std {std:.3g}): a zero row (an embedding padding_idx, as in "
        f"Kimi Linear checkpoints) makes deep models' gradients overflow")
    return ids


def saves_as_plain_family(init_from, config) -> bool:
    """Whether a run's final/ is the family's own plain folder: a standard-residual fine-tune of a checkpoint that was
    itself the family's own (`llama`, not `llama_attnres`), so anyone loads the result without this package. Kimi
    Linear has no plain model here and stays `kimi_linear_attnres`."""
    if init_from is None or getattr(config, "attn_res_mode", None) != "standard":
        return False
    family, model_type = family_of_folder(init_from)
    return family != "kimi_linear" and model_type == family


def write_plain_family_folder(folder: Path, config) -> None:
    """Turn a saved standard-mode AttnRes folder into the family's own: the standard model's tensors are exactly the
    family's (same names and shapes), so only the config changes, and the generated code and the AttnRes weights
    record go."""
    from ..families.upcycle import plain_family_class, plain_family_config
    from ..folders.saved_model import RECORD_FILE

    plain = plain_family_config(config)
    plain.architectures = [plain_family_class(plain.model_type).__name__]
    plain.save_pretrained(folder)
    for path in [*Path(folder).glob("*.py"), Path(folder) / RECORD_FILE]:
        path.unlink(missing_ok=True)

