"""Configuration of Kimi Linear with Attention Residuals: `KimiLinearConfig` plus the AttnRes fields
(`hf_attnres.core.config.AttnResConfigMixin`) and Kimi K3's text-backbone fields, each checked at construction
(`config_checks`)."""
from __future__ import annotations

import dataclasses

from huggingface_hub.dataclasses import strict
from transformers import KimiLinearConfig, PreTrainedConfig

from hf_attnres.core.config import (
    ATTN_RES_BACKENDS,
    ATTN_RES_MODES,
    ATTN_RES_SCORES,
    AttnResConfigMixin,
)
from hf_attnres.core.config_checks import check_activation, check_attn_res_types, check_init_kwargs
from hf_attnres.families.kimi_linear.config_checks import check_fields, check_nested, check_routing
from hf_attnres.families.kimi_linear.k3.config import check_k3_dict, check_k3_fields, unwrap


@strict
class KimiLinearAttnResConfig(AttnResConfigMixin, KimiLinearConfig):
    r"""
    attn_res_mode (`str`, *optional*):
        How sub-layers read the depth stream: `"standard"` (PreNorm residual sum, identical to Kimi Linear), `"block"`
        (Block AttnRes) or `"full"` (Full AttnRes). Unset, it follows Kimi K3: block mode when
        `attn_res_block_size > 0`, standard otherwise.
    attn_res_block_size (`int`, defaults to 0):
        Decoder layers per block in block mode (K3: 12 of 93 layers; the paper's 48B model: 3 of 27). It need not
        divide `num_hidden_layers`; a size >= the layer count makes a single block.
    attn_res_backend (`str`, defaults to `"auto"`):
        Kernel backend of every mix, read by the fused kernels the installed package maps to the depth mix: `"auto"`
        (Triton on CUDA, the fused C++ CPU kernel on CPU, the eager PyTorch path elsewhere), `"torch"` (eager
        PyTorch), `"triton"` or `"cpp"` (the C++ CPU kernel, built on first use and cached; the eager path where it
        cannot be built). Where no kernel is mapped (a folder loaded without the package) the mix is the eager path.
    attn_res_two_phase (`bool`, *optional*):
        The two-phase inference schedule (paper section 4) for no-grad block-mode forwards (prefill, decode): Phase 1
        mixes all of a block's pseudo-queries against the completed blocks at once, Phase 2 merges each with the running
        partial sum by online softmax. Unset: on with the Triton backend (where it saves memory traffic), off with the
        PyTorch one, whose plain loop then stays bit-identical to the training forward. True / False force it.
    attn_res_fuse_norm (`bool`, defaults to `True`):
        Apply the RMSNorm that reads each mix (`input_layernorm`, `post_attention_layernorm`, `model.norm`) inside the
        mix kernel (Triton backend).
    attn_res_recompute (`bool`, defaults to `False`):
        Triton backward: re-read the sources instead of saving per-token softmax statistics (less memory, one more
        pass).
    attn_res_static_mixing (`bool`, defaults to `False`):
        Ablation (paper section 5.3, DenseFormer-style): input-independent depth weights, a learned logit per source
        and mix point (`{point}_res_logits.weight`, zero at init), softmax over them; no pseudo-query, no key norm.
    attn_res_score (`str`, defaults to `"softmax"`):
        Ablation: `"sigmoid"` gates each source independently by sigmoid(score) (no normalisation over the sources)
        instead of the competitive softmax.
    attn_res_key_norm (`bool`, defaults to `True`):
        Ablation: `False` scores the raw sources (no RMSNorm on the keys, no `{point}_res_norm` tensor).
        The three ablations run on the plain PyTorch reference (`hf_attnres/kernels/mix/variants.py`).
    attn_res_query_init_std (`float`, defaults to 0.0):
        Initial standard deviation of the pseudo-queries. 0 (the paper and K3): zero queries, a uniform mix at
        step 0, no random draw. Only initialization: a trained model's tensors and forward are unchanged.
    attn_res_key_norm_init (`float`, defaults to 1.0):
        Initial gain of the keys' RMSNorms (`{point}_res_norm`). It scales every depth score, so it acts as the initial
        inverse temperature of the depth softmax (and of the queries' gradient). Only initialization.
    activation_situ_beta, activation_situ_linear_beta, routed_expert_hidden_size, latent_moe_use_norm,
    mla_use_output_gate, mla_use_nope, linear_use_full_rank_gate, linear_gate_lower_bound:
        Kimi K3's text-backbone fields (SiTU-GLU with `hidden_act="situ"`, latent MoE, MLA output gate, KDA full-rank
        output gate and forget-gate floor; K3's `linear_attn_config.use_full_rank_gate` / `.gate_lower_bound`). Unset,
        every module is Kimi Linear's. See `hf_attnres/families/kimi_linear/k3` and docs/K3.md.
    """

    model_type = "kimi_linear_attnres"
    attn_res_family = "kimi_linear"
    extra_activations = ("situ",)  # Kimi K3's SiTU-GLU (k3/activation.py)
    # Kimi K3's text backbone (hf_attnres/families/kimi_linear/k3, docs/K3.md); unset, every module is Kimi Linear's
    activation_situ_beta: float | None = None
    activation_situ_linear_beta: float | None = None
    routed_expert_hidden_size: int | None = None
    latent_moe_use_norm: bool = False
    mla_use_output_gate: bool = False
    mla_use_nope: bool = True
    linear_use_full_rank_gate: bool = False
    linear_gate_lower_bound: float | None = None

    def check_field_types(self, kwargs: dict) -> None:
        """ValueError naming the field for a wrong type, size, sign, non-finite value or dtype (2.5, True or "2" as a
        count, a truthy "no" as a switch, NaN as an epsilon), over Kimi Linear's fields (`config_checks`), and an
        activation transformers (or K3's SiTU) has; the AttnRes fields' types first. Then the constructor arguments
        transformers reads without checking (`torch_dtype`, and `linear_attn_config`, whose keys it reads without
        naming a typo)."""
        check_attn_res_types(self)
        check_fields(self)
        check_activation(self.hidden_act, self.extra_activations)
        check_init_kwargs(kwargs)
        check_nested(self, kwargs)

    def check_attn_res(self):
        """The AttnRes layout, the per-layer plans it relies on, the MoE routing and K3's fields, once built."""
        super().check_attn_res()  # mode, block size, backend, ablations (hf_attnres/core/config.py)
        for field in ("layer_types", "mlp_layer_types"):
            types = getattr(self, field)
            if types is not None and len(types) != self.num_hidden_layers:
                raise ValueError(
                    f"{field} has {len(types)} entries but num_hidden_layers is {self.num_hidden_layers}: one per layer"
                )
        check_routing(self)
        check_k3_fields(self)

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        try:
            config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        except RecursionError:  # JSON nested thousands deep: no config describes a model that way
            raise OSError(
                f"{pretrained_model_name_or_path}: config.json is nested too deeply to be a model config"
            ) from None
        if not config_dict:  # transformers would build the default (48B) model from nothing: refuse
            raise OSError(f"{pretrained_model_name_or_path}: no config.json there, so the model's size and AttnRes "
                          "layout are unknown (a saved model folder holds config.json beside its weights)")
        return config_dict, kwargs

    @classmethod
    def text_config_dict(cls, config_dict: dict) -> dict:
        """The language model's fields: a Kimi K3 config.json nests them under `text_config` (a Kimi Linear config)."""
        if "text_config" not in config_dict:
            return config_dict
        if not isinstance(config_dict["text_config"], dict):
            raise ValueError(f"text_config must be an object (Kimi K3 layout), got {config_dict['text_config']!r}")
        text_config = dict(config_dict["text_config"])
        # a language-model field beside text_config would be silently dropped (or win): refuse, naming it
        stray = sorted(key for key in config_dict
                       if key in _language_fields(cls) and text_config.get(key, ...) != config_dict[key])
        if stray:
            raise ValueError(f"config has text_config (Kimi K3 layout) and also top-level field(s) {stray}: the "
                             "language model's fields belong under text_config only")
        for key in ("torch_dtype", "dtype", "transformers_version"):
            if key in config_dict and key not in text_config:
                text_config[key] = config_dict[key]
        return text_config

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        if "text_config" in config_dict:
            cls.text_config_dict(config_dict)  # refuses language fields beside text_config, naming them
            # what is left beside text_config repeats it exactly: drop it, so the K3 wrapper is read as one
            config_dict = {key: value for key, value in config_dict.items() if key not in _language_fields(cls)}
        # A Kimi K3 config.json nests the language model under `text_config` (a Kimi Linear config plus K3 fields):
        # every field is checked (unknown ones are an error), then the text part is read
        check_k3_dict(config_dict, cls)
        config_dict = unwrap(config_dict)
        # A Moonshot config.json says model_type "kimi_linear": this class's type must win, or transformers treats the
        # loaded config as its own Kimi Linear (and skips our weight-conversion mapping)
        config_dict = {key: value for key, value in config_dict.items() if key != "model_type"}
        return super().from_dict(config_dict, **kwargs)


def _language_fields(cls) -> set[str]:
    """Fields of the language model config (not the generic ones a multimodal wrapper also carries)."""
    generic = {f.name for f in dataclasses.fields(PreTrainedConfig)} | {
        "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings", "use_cache", "initializer_range"}
    return {f.name for f in dataclasses.fields(cls)} - generic


__all__ = ["KimiLinearAttnResConfig", "ATTN_RES_MODES", "ATTN_RES_BACKENDS", "ATTN_RES_SCORES"]
