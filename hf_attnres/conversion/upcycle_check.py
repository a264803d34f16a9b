"""How close an upcycled model is to its source, and the tolerance the epsilon argument allows.

With zero pseudo-queries every mix is h / n (h: the standard stream, n: the point's sources), and the RMSNorm that
reads it gives norm(h / n) = w * h / sqrt(mean(h^2) + n^2 eps): the upcycled model is the source model with the
epsilon of each reading norm multiplied by n^2 (`eps_scaled_copy` builds that model; it must match the upcycled one to
rounding). Against the source, each reading norm's output then changes by the relative factor
delta_p = 1 - sqrt((ms + eps) / (ms + n^2 eps)) <= (n^2 - 1) eps / (2 ms), ms being the mean square of that norm's
input per token. `tolerance` states the logit bound from it: 4 * sum_p max_token(delta_p) * max |logit|. The factor
4 is first-order propagation through one sub-layer (a relative change delta of its input changes attention scores
(q . k) and the gated MLP product (gate * up) by at most about 2 delta, and the stream by at most that again through
the output projection), summed over the 2L + 1 points since the residual adds them, not multiplies them.

A comparison judges only while the tolerance is small against the logits it bounds: where the source's activations
are small against n^2 eps (tiny random models, an absurd `rms_norm_eps`) the bound exceeds the logits themselves, and
any model, an unrelated one included, would fall within it. `judge` calls such a comparison inconclusive, and also
asks the top-1 token to agree almost everywhere: a change a fraction of a percent of the logit scale flips only
near-ties.
"""
from __future__ import annotations

import copy

import torch

from ..core.depth_layout import DepthLayout


def reading_norms(upcycled) -> list[tuple[str, int]]:
    """(module name, number of sources) of every norm that reads a mix, in the upcycled model's module names."""
    layout = DepthLayout.of(upcycled.config)
    found = []
    for i, layer in enumerate(upcycled.model.layers):
        for point, norm in zip(("self_attention", "mlp"), layer.attn_res_input_norms):
            found.append((f"model.layers.{i}.{norm}", layout.num_sources(i, point)))
    found.append(("model.norm", layout.num_sources(layout.num_layers, "output_attn")))
    return found


def _eps_name(module) -> str:
    return "variance_epsilon" if hasattr(module, "variance_epsilon") else "eps"  # Llama-style / Gemma-style RMSNorm


def eps_scaled_copy(source, upcycled):
    """The source model with every reading norm's epsilon multiplied by its point's n^2: what the upcycled model
    computes, exactly, by the argument above."""
    scaled = copy.deepcopy(source)
    for name, n in reading_norms(upcycled):
        module = scaled.get_submodule(name)
        setattr(module, _eps_name(module), getattr(module, _eps_name(module)) * n * n)
    return scaled


@torch.no_grad()
def tolerance(source, upcycled, input_ids, attention_mask=None) -> float:
    """The logit tolerance stated from the epsilon argument (module docstring), on these inputs. A gated-read upcycle
    (`hf_attnres.core.gated_read`) reads the standard stream itself, summed from its n sources in another order: its
    delta_p is that rounding, n * eps(dtype), propagated the same way."""
    if getattr(upcycled.config, "attn_res_gated_read", False):
        unit = torch.finfo(next(upcycled.parameters()).dtype).eps
        logits = source(input_ids, attention_mask=attention_mask).logits
        return 4 * sum(n * unit for _, n in reading_norms(upcycled)) * float(logits.abs().max())
    deltas, handles = [], []
    for name, n in reading_norms(upcycled):
        module = source.get_submodule(name)
        eps = getattr(module, _eps_name(module))

        def record(_, args, n=n, eps=eps):
            ms = args[0].float().pow(2).mean(-1)
            if attention_mask is not None and ms.shape[:2] == attention_mask.shape:
                ms = ms[attention_mask.bool()]
            deltas.append(float((1 - torch.sqrt((ms + eps) / (ms + n * n * eps))).max()))

        handles.append(module.register_forward_pre_hook(record))
    try:
        logits = source(input_ids, attention_mask=attention_mask).logits
    finally:
        for handle in handles:
            handle.remove()
    return 4 * sum(deltas) * float(logits.abs().max())


@torch.no_grad()
def compare(source, upcycled, input_ids, attention_mask=None) -> dict:
    """max |logit difference|, the logit scale, top-1 agreement and the stated tolerance, over the given tokens."""
    expected = source(input_ids, attention_mask=attention_mask).logits.float()
    got = upcycled(input_ids, attention_mask=attention_mask).logits.float()
    keep = attention_mask.bool() if attention_mask is not None else torch.ones(expected.shape[:2], dtype=torch.bool)
    expected, got = expected[keep], got[keep]
    return {
        "max_abs_diff": float((got - expected).abs().max()),
        "max_abs_logit": float(expected.abs().max()),
        "top1_agreement": float((got.argmax(-1) == expected.argmax(-1)).float().mean()),
        "tolerance": tolerance(source, upcycled, input_ids, attention_mask),
        "tokens": int(keep.sum()),
    }


# a tolerance above this fraction of max |logit| no longer tells the source's function from another one
TOLERANCE_FRACTION = 0.05
# an exact upcycle flips the top-1 token only at near-ties: at most 1 token in 100
MIN_TOP1_AGREEMENT = 0.99


def judge(report: dict) -> dict:
    """`report` (of `compare`, or of a plain rewrite with tolerance 0) with its verdict: `within` (max |logit
    difference| <= tolerance), `conclusive` (tolerance <= TOLERANCE_FRACTION of max |logit|), `agrees` (top-1
    agreement >= MIN_TOP1_AGREEMENT), `passed` (all three) and `verdict`, the words that say which failed."""
    scale = report["max_abs_logit"]
    report["within"] = report["max_abs_diff"] <= report["tolerance"]
    report["conclusive"] = report["tolerance"] <= TOLERANCE_FRACTION * scale
    report["agrees"] = report["top1_agreement"] >= MIN_TOP1_AGREEMENT
    report["passed"] = report["within"] and report["conclusive"] and report["agrees"]
    if not report["within"]:
        report["verdict"] = "OUTSIDE the tolerance"
    elif not report["conclusive"]:
        share = report["tolerance"] / scale if scale else float("inf")
        report["verdict"] = (f"inconclusive: the tolerance is {share:.0%} of the largest logit (at most "
                             f"{TOLERANCE_FRACTION:.0%} tells one function from another; the source's activations "
                             "are small against its rms_norm_eps)")
    elif not report["agrees"]:
        report["verdict"] = (f"within the tolerance, but the top-1 token agrees at fewer than "
                             f"{MIN_TOP1_AGREEMENT:.0%} of the tokens")
    else:
        report["verdict"] = "within the tolerance"
    return report


__all__ = ["reading_norms", "eps_scaled_copy", "tolerance", "compare", "judge", "TOLERANCE_FRACTION",
           "MIN_TOP1_AGREEMENT"]
