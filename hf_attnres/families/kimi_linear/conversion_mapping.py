"""Moonshot <-> HF-native tensor names and layouts, as transformers' weight-conversion mapping.

transformers already knows how to read Moonshot's Kimi Linear layout (`conversion_mapping.py`, "kimi_linear"): forget
gate renames, the q/k/v short convolutions concatenated into one `conv1d`, and per-expert `w1/w3/w2` merged into
`gate_up_proj` / `down_proj`. We register the same mapping for our model type so `from_pretrained` reads a Moonshot
folder directly, and drive the very same transforms in `convert_tensors` for streaming conversion in both directions.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.core_model_loading import PrefixChange, WeightRenaming, WeightTransform, revert_weight_conversion

MODEL_TYPE = "kimi_linear_attnres"
# Kimi K3's multimodal wrapper stores the language model under this prefix (vision tensors sit beside it)
LANGUAGE_MODEL_PREFIX = "language_model."
# transformers renames every `.block_sparse_moe.` to `.mlp.`; reversed (saving, `--to moonshot`) that would also move
# the dense first MLPs into `block_sparse_moe`, which Moonshot's code names `mlp`. We rename the MoE parts one by one.
_GENERIC_MOE_RENAME = r"\.block_sparse_moe\."
_MOE_PARTS = ("gate", "shared_experts", "experts", "routed_expert_down_proj", "routed_expert_up_proj",
              "routed_expert_norm")
# ...but transformers' own `KimiLinearForCausalLM.save_pretrained` did write them there: read those names too
_TRANSFORMERS_DENSE_MLP = r"\.block_sparse_moe\.(gate_proj|up_proj|down_proj)\."
_NEVER = "\x00never\x00"  # a pattern no tensor name contains


class LoadOnlyRenaming(WeightRenaming):
    """A rename applied when reading; its reverse renames nothing, so saving writes Moonshot's own names."""

    __slots__ = ()

    def reverse_transform(self) -> WeightRenaming:
        return _ReverseOfLoadOnly(_NEVER, _NEVER)


class _ReverseOfLoadOnly(WeightRenaming):
    __slots__ = ()

    def reverse_transform(self) -> WeightRenaming:
        return transformers_dense_mlp_renaming()


def transformers_dense_mlp_renaming() -> LoadOnlyRenaming:
    return LoadOnlyRenaming(_TRANSFORMERS_DENSE_MLP, r"\.mlp\.\1\.")


def moonshot_transforms() -> list[WeightTransform]:
    """transformers' "kimi_linear" transforms (Moonshot names -> HF-native), with MoE-only renames."""
    transforms = []
    for transform in get_checkpoint_conversion_mapping("kimi_linear"):
        if isinstance(transform, WeightRenaming) and transform._original_source_patterns == [_GENERIC_MOE_RENAME]:
            transforms += [WeightRenaming(rf"\.block_sparse_moe\.{part}\.", rf"\.mlp\.{part}\.") for part in _MOE_PARTS]
            transforms.append(transformers_dense_mlp_renaming())
        else:
            transforms.append(transform)
    return transforms


def canonical_name(name: str) -> str:
    """A stored name as Moonshot's layout spells it: no K3 wrapper prefix, dense MLPs under `mlp`."""
    return transformers_dense_mlp_renaming().rename_source_key(name.removeprefix(LANGUAGE_MODEL_PREFIX))[0]


def register_moonshot_mapping() -> None:
    """Let `KimiLinearAttnResForCausalLM.from_pretrained` read Moonshot folders (with or without the K3 wrapper)."""
    from .k3.layout import k3_load_transforms

    moonshot = moonshot_transforms()
    transforms = [PrefixChange(prefix_to_remove=LANGUAGE_MODEL_PREFIX.rstrip(".")), *k3_load_transforms(moonshot),
                  *moonshot]
    register_checkpoint_conversion_mapping(MODEL_TYPE, transforms, overwrite=True)


def convert_tensors(tensors: dict[str, torch.Tensor], config, to: str) -> dict[str, torch.Tensor]:
    """Moonshot -> HF-native (`to="hf"`) or back (`to="moonshot"`), with transformers' own transforms.

    `tensors` must hold every tensor a transform combines (a whole decoder layer is always enough). Works on meta
    tensors too, which is how a conversion is planned and checked before any data is read.
    """
    transforms = moonshot_transforms()
    if to == "hf":
        # `revert_weight_conversion` reverses what it is given: hand it the reversed mapping to run it forward
        transforms = [transform.reverse_transform() for transform in transforms[::-1]]
    elif to != "moonshot":
        raise ValueError(f"to must be 'hf' or 'moonshot', got {to!r}")
    holder = SimpleNamespace(config=config, _weight_conversions=transforms)
    converted = revert_weight_conversion(holder, dict(tensors))
    # Chunk/split ops return views of one buffer; safetensors refuses to save tensors that share memory
    return {name: _own_storage(tensor) for name, tensor in converted.items()}


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.contiguous()
    if tensor.device.type != "meta" and tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        return tensor.clone()
    return tensor


register_moonshot_mapping()
