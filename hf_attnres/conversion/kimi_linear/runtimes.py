"""What each serving runtime can represent, as rules on a config: checked before an export writes anything.

Every runtime that serves AttnRes (vLLM, SGLang, llama.cpp, TensorRT-LLM, MLX) reads Kimi K3's checkpoint layout and
banks whole decoder layers in blocks of `attn_res_block_size`; the K3-only runtimes (llama.cpp, TensorRT-LLM, MLX, and
SGLang's `kimi_k3`) also hard-code K3's pieces. Rules quote what the runtimes' own converters and graphs assert
(llama.cpp: `conversion/kimi_k3.py`, `src/models/kimi-k3.cpp`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConversionError

TARGETS = ("k3", "kimi-linear")
ALL_RUNTIMES = "vLLM, SGLang, llama.cpp, TensorRT-LLM and MLX"
K3_RUNTIMES = "llama.cpp, SGLang, TensorRT-LLM and MLX (Kimi K3 layout)"
RUNTIMES_OF = {"k3": ALL_RUNTIMES, "kimi-linear": "vLLM (KimiLinearForCausalLM -> its kimi_k3 model)"}


class ExportRefused(ConversionError):
    """The model holds something the target runtime cannot compute (named in the message); nothing was written."""


@dataclass(frozen=True)
class Rule:
    field: str
    targets: tuple[str, ...]
    holds: Callable[[object], bool]
    runtimes: str
    why: str


def _value(config, field: str):
    return getattr(config, field, None)


def _has_both_attention_kinds(config) -> bool:
    return {"linear_attention", "full_attention"} <= set(config.layer_types)


def _ungrouped_routing(config) -> bool:
    groups = config.num_expert_group or 1
    return groups <= 1 or (config.topk_group or groups) >= groups


BOTH = TARGETS
RULES = [
    Rule("attn_res_mode", BOTH, lambda c: c.attn_res_mode != "full", ALL_RUNTIMES,
         "Full AttnRes reads every sub-layer output; the runtimes bank whole layers in blocks "
         "(attn_res_block_size) and have no per-sub-layer sources"),
    Rule("attn_res_mode", ("k3",), lambda c: c.attn_res_mode != "standard", ALL_RUNTIMES,
         "a standard residual has no K3 spelling: llama.cpp's converter requires attn_res_block_size while vLLM "
         "reads any value, 0 included, as Block AttnRes; export --to kimi-linear (no attn_res_block_size: off)"),
    Rule("attn_res_static_mixing", BOTH, lambda c: not c.attn_res_static_mixing, ALL_RUNTIMES,
         "an ablation: the runtimes compute the softmax depth mix of pseudo-queries only"),
    Rule("attn_res_score", BOTH, lambda c: c.attn_res_score == "softmax", ALL_RUNTIMES,
         "an ablation: the runtimes score sources with a softmax only"),
    Rule("attn_res_key_norm", BOTH, lambda c: c.attn_res_key_norm, ALL_RUNTIMES,
         "an ablation: the runtimes always RMS-normalise the keys (llama.cpp fuses res_norm * res_proj)"),
    Rule("hidden_act", ("k3",), lambda c: c.hidden_act == "situ", K3_RUNTIMES,
         "their Kimi K3 models compute SiTU only (llama.cpp's converter asserts hidden_act == 'situ'); export "
         "--to kimi-linear for vLLM"),
    Rule("mla_use_nope", ("k3",), lambda c: _value(c, "mla_use_nope") is not False, K3_RUNTIMES,
         "Kimi K3's MLA is NoPE (llama.cpp's converter asserts mla_use_nope)"),
    Rule("moe_router_activation_func", ("k3",),
         lambda c: _value(c, "moe_router_activation_func") in (None, "sigmoid"), K3_RUNTIMES,
         "Kimi K3 routes with sigmoid scores (llama.cpp's converter asserts it)"),
    Rule("num_expert_group", ("k3",), _ungrouped_routing, "llama.cpp",
         "its Kimi K3 converter writes no expert-group fields, so grouped top-k routing (topk_group < "
         "num_expert_group) would run ungrouped, a different model"),
    Rule("linear_num_heads", ("k3",), lambda c: c.linear_num_heads == c.num_attention_heads, "llama.cpp",
         "its Kimi K3 graph sizes KDA layers with num_attention_heads (K3: 96 and 96), so "
         "linear_attn_config.num_heads must equal num_attention_heads"),
    Rule("layer_types", ("k3",), _has_both_attention_kinds, "llama.cpp",
         "its Kimi K3 graph aborts (GGML_ASSERT(buffer)) unless the model has at least one KDA "
         "(linear_attention) and one MLA (full_attention) layer"),
]


def refusals(config, to: str) -> list[str]:
    """One message per rule the config breaks for target `to`, each naming the field and the runtime."""
    if to not in TARGETS:
        raise ConversionError(f"--to must be one of {TARGETS}, got {to!r}")
    return [
        f"{rule.field}={_value(config, rule.field)!r}: {rule.runtimes} cannot represent it ({rule.why})"
        for rule in RULES
        if to in rule.targets and not rule.holds(config)
    ]


def check_representable(config, to: str) -> None:
    """Raise ExportRefused listing every field the target's runtimes cannot represent."""
    problems = refusals(config, to)
    if problems:
        raise ExportRefused.from_problems(problems, f"cannot export --to {to}")
