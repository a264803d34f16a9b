"""DeepSpeed `PipelineModule` partitioning of an AttnRes causal LM of any family.

The model becomes a flat list of pipe layers: the token embedding, one pipe layer per decoder layer, and the output head
(output mix, final norm, `lm_head`). Between pipe layers (and so across any stage boundary) travels the tuple of depth
sources exactly as the model keeps it: standard -> (hidden,); block -> (embedding, completed blocks..., partial sum);
full -> (embedding, every sub-layer output...). DeepSpeed sends every tensor of the tuple forward and the gradient of
every floating tensor back, so later stages' reads of the block bank reach the earlier blocks' parameters.

Every piece is the model's own module: the full model is built on the meta device (no memory), and a stage materializes
only the pieces it owns (`LayerSpec` builds them on the owning rank) and copies their weights by module name. What a
decoder layer reads beside the sources (mask, positions, rotary embeddings) and the family's last step on the logits
come from what the model declares (`hf_attnres.pipeline.layout`), so no piece names a family.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.loss.loss_utils import LOSS_MAPPING

from ..core.mix_point import AttnResMixing
from .ds import deepspeed
from .layout import (
    LayerContext,
    causal_lm_class,
    logits_step,
    restore_unsaved_buffers,
    single_source_mix_params,
)

LayerSpec, PipelineModule = deepspeed.pipe.LayerSpec, deepspeed.pipe.PipelineModule
TiedLayerSpec = deepspeed.pipe.TiedLayerSpec

DECODER_PIPE_TYPE = "DecoderLayerPipe"
TIED_KEY = "embed_tokens"  # the tied input / output embedding's key among DeepSpeed's tied modules


def meta_model(config) -> nn.Module:
    """The full model of `config`'s family on the meta device: its module tree and a config resolved exactly as
    `from_pretrained` would (attention / experts implementations), at no memory cost."""
    with torch.device("meta"):
        return causal_lm_class(config)(config)


def module_name(model: nn.Module, module: nn.Module) -> str:
    """`module`'s qualified name in `model`."""
    return next(name for name, candidate in model.named_modules() if candidate is module)


def materialize(module: nn.Module, weights, model_prefix: str, init_weights) -> nn.Module:
    """Allocate a meta module on CPU, recompute its unsaved buffers (`init_weights`: the model's `_init_weights`) and
    load its tensors (named `model_prefix + local name`) from `weights`."""
    module.to_empty(device="cpu")
    restore_unsaved_buffers(module, init_weights)
    local_names = list(module.state_dict().keys())
    tensors = weights.get([model_prefix + name for name in local_names])
    module.load_state_dict({name: tensors[model_prefix + name] for name in local_names}, strict=True)
    return module


def as_sources(x) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


class PipeLayer(nn.Module):
    """A pipe layer knows the full model's name of each of its tensors: {local prefix: full-model prefix}."""

    model_prefixes: dict[str, str]

    def model_name(self, local_name: str) -> str:
        for local, full in self.model_prefixes.items():
            if local_name.startswith(local):
                return full + local_name[len(local) :]
        raise KeyError(f"{type(self).__name__} has no full-model name for {local_name!r}")

    def load_from(self, skeleton: nn.Module, skeleton_modules: dict[str, nn.Module], weights) -> None:
        for local, module in skeleton_modules.items():
            self.add_module(local.rstrip("."), materialize(module, weights, self.model_prefixes[local],
                                                           skeleton._init_weights))


class EmbeddingPipe(PipeLayer):
    """input_ids [batch, seq] -> (embedding,): the first depth source."""

    def __init__(self, skeleton: nn.Module, weights):
        super().__init__()
        self.vocab_size = skeleton.config.vocab_size
        embedding = skeleton.get_input_embeddings()
        self.model_prefixes = {"embed_tokens.": module_name(skeleton, embedding) + "."}
        self.load_from(skeleton, {"embed_tokens.": embedding}, weights)
        self.postprocess_logits = logits_step(skeleton)

    def tied_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """normed hidden -> logits through the embedding matrix: `lm_head` of a model with tied embeddings (the last
        stage's copy of this pipe layer; DeepSpeed sums the two copies' gradients, `TiedLayerSpec`)."""
        return self.postprocess_logits(nn.functional.linear(hidden, self.embed_tokens.weight))

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(f"the first pipeline stage takes integer input_ids [batch, seq], got {input_ids.dtype} "
                             f"{tuple(input_ids.shape)}")
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= self.vocab_size:
            raise ValueError(f"input_ids must lie in [0, vocab_size={self.vocab_size}), got values in [{low}, {high}]")
        return (self.embed_tokens(input_ids),)


class DecoderLayerPipe(PipeLayer):
    """One decoder layer of the model: sources in, sources out, updated by the model's own rule.

    Packed, unpadded causal batches only: masks, position ids and rotary embeddings are rebuilt here from the sequence
    length by the model's own `layer_kwargs` (`LayerContext`), so nothing but the depth sources has to cross a stage
    boundary.
    """

    def __init__(self, skeleton: nn.Module, layer_idx: int, weights):
        super().__init__()
        self.config = skeleton.config
        self.layer_idx = layer_idx
        self.model_prefixes = {"layer.": f"{module_name(skeleton, skeleton.model.layers)}.{layer_idx}."}
        self.load_from(skeleton, {"layer.": skeleton.model.layers[layer_idx]}, weights)
        self.layer_context = LayerContext(skeleton.model)
        # A mix over a single source is the identity: its parameters' gradient is exactly zero. Freeze them, so the
        # pipeline's AdamW (weight decay on every parameter) does not move tensors that have no effect
        for name in single_source_mix_params(self.config, layer_idx):
            self.layer.get_parameter(name).requires_grad_(False)

    def forward(self, sources) -> tuple[torch.Tensor, ...]:
        sources = as_sources(sources)
        outputs = self.layer(*sources, **self.layer_context(sources[0])(self.layer_idx))
        return self.layer.update_sources(sources, outputs[: self.layer.num_new_sources])


class OutputHeadPipe(AttnResMixing, PipeLayer):
    """Sources -> logits: the model's output mix (`AttnResMixing.mix`, as the base model uses it), final norm,
    `lm_head` and the family's last step on the logits (Gemma's soft-capping). With tied embeddings it ends at the
    final norm: the embedding's copy on this stage makes the logits (`EmbeddingPipe.tied_logits`)."""

    def __init__(self, skeleton: nn.Module, weights):
        super().__init__()
        self.config = skeleton.config
        base = skeleton.model
        self.fusable_norm = base.fusable_norm  # the model's norm policy: its final norm fuses as in the model
        # every base-model module but the embedding and the layers: the final norm and the output mix point's modules,
        # under the names `AttnResMixing.mix` reads (a rotary embedding comes along unused: it holds no saved tensor)
        skip = (skeleton.get_input_embeddings(), base.layers)
        modules = {f"{name}.": child for name, child in base.named_children() if all(child is not s for s in skip)}
        self.tied = tied_embeddings(self.config)
        if not self.tied:
            modules["lm_head."] = skeleton.get_output_embeddings()
        self.model_prefixes = {local: module_name(skeleton, module) + "." for local, module in modules.items()}
        self.load_from(skeleton, modules, weights)
        self.postprocess_logits = logits_step(skeleton)

    def forward(self, sources) -> torch.Tensor:
        # the final norm goes through the mix, as in the model: a backend may fuse it (and its gradient) into the mix
        hidden = self.mix("output_attn", as_sources(sources), None, self.norm)
        return hidden if self.tied else self.postprocess_logits(self.lm_head(hidden))


class CausalLMLoss:
    """The model's own loss (`ForCausalLM`: shift, mean over non-ignored tokens) on the last stage's logits."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.loss = LOSS_MAPPING["ForCausalLM"]

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(logits=logits, labels=labels, vocab_size=self.vocab_size)


def tied_embeddings(config) -> bool:
    return bool(getattr(config, "tie_word_embeddings", False))


def pipeline_layer_specs(config, weights) -> list[LayerSpec]:
    """[embedding, decoder layer 0..L-1, output head] as LayerSpecs: each is built only on the stage that owns it.
    With tied embeddings the embedding is a `TiedLayerSpec` that the last stage holds too, after the head, for the
    logits: DeepSpeed keeps the two copies equal (it sums their gradients and counts them once in the norm)."""
    skeleton = meta_model(config)
    tied = tied_embeddings(config)
    embedding = (TiedLayerSpec(TIED_KEY, EmbeddingPipe, skeleton, weights, tied_weight_attr=["embed_tokens.weight"])
                 if tied else LayerSpec(EmbeddingPipe, skeleton, weights))
    head = [TiedLayerSpec(TIED_KEY, EmbeddingPipe, skeleton, weights, forward_fn=EmbeddingPipe.tied_logits,
                          tied_weight_attr=["embed_tokens.weight"])] if tied else []
    return [
        embedding,
        *(LayerSpec(DecoderLayerPipe, skeleton, i, weights) for i in range(config.num_hidden_layers)),
        LayerSpec(OutputHeadPipe, skeleton, weights),
        *head,
    ]


def build_pipeline(
    config,
    weights,
    num_stages: int,
    partition_method: str = f"type:{DECODER_PIPE_TYPE}",
    activation_checkpoint_interval: int = 0,
) -> PipelineModule:
    """The DeepSpeed PipelineModule of the model (call after `deepspeed.init_distributed`).

    `partition_method`: DeepSpeed's; the default balances decoder layers across stages. `weights`: a
    `StateDictWeights` (module names, as in `model.state_dict()`), released once the stages are built.
    """
    if not 1 <= num_stages <= config.num_hidden_layers:
        raise ValueError(f"num_stages must be in [1, num_hidden_layers={config.num_hidden_layers}], got {num_stages}")
    pipe = PipelineModule(
        layers=pipeline_layer_specs(config, weights),
        num_stages=num_stages,
        loss_fn=CausalLMLoss(config.vocab_size),
        partition_method=partition_method,
        activation_checkpoint_interval=activation_checkpoint_interval,
        # non-reentrant: the engine runs one backward per output tensor of a stage (retain_graph between them), which
        # DeepSpeed's default reentrant checkpoint cannot serve twice
        activation_checkpoint_func=deepspeed.checkpointing.non_reentrant_checkpoint,
        checkpointable_layers=[DECODER_PIPE_TYPE],
    )
    weights.release()  # the stages copied their tensors; the LayerSpecs would otherwise keep the whole model alive
    return pipe


def local_model_state_dict(pipe: PipelineModule) -> dict[str, torch.Tensor]:
    """This stage's tensors under the full model's module names (as in `model.state_dict()`). A tied embedding's
    copy that serves as `lm_head` (a function of the module, not a pipe layer) is the first stage's to save."""
    tensors = {}
    for layer in pipe.forward_funcs:
        if not isinstance(layer, nn.Module):
            continue
        for name, tensor in layer.state_dict().items():
            tensors[layer.model_name(name)] = tensor
    return tensors


__all__ = [
    "EmbeddingPipe",
    "DecoderLayerPipe",
    "OutputHeadPipe",
    "CausalLMLoss",
    "meta_model",
    "pipeline_layer_specs",
    "build_pipeline",
    "local_model_state_dict",
    "as_sources",
]
