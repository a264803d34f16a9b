"""compare's "Matched?" table (hf_attnres.evaluation.provenance) on real saved pairs: every family's plain tiny model
and its upcycled Block AttnRes copy are matched; a real difference of architecture is a MISMATCH naming the field."""
from __future__ import annotations

import json

import pytest
import torch

from hf_attnres import upcycle
from hf_attnres.evaluation.provenance import architecture, describe_model, matched_check, matched_verdict
from tests.families.tiny import FAMILIES, source_model


def kimi_linear_model(**fields):
    """transformers' own Kimi Linear (the plain family model), tiny, from the AttnRes tiny config's family fields."""
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    from hf_attnres.utils.tiny import tiny_config

    own = set(KimiLinearConfig().to_dict())
    config = {k: v for k, v in tiny_config("standard", family="kimi_linear").to_dict().items()
              if k in own and not k.startswith("attn_res") and k not in ("model_type", "architectures", "auto_map")}
    torch.manual_seed(0)
    return KimiLinearForCausalLM(KimiLinearConfig(**config | fields)).eval()


def plain_model(family: str, **fields):
    return kimi_linear_model(**fields) if family == "kimi_linear" else source_model(family, **fields)


ALL_FAMILIES = [*FAMILIES, "kimi_linear"]


def statuses(folders) -> dict:
    models = [describe_model(folder, folder.name) for folder in folders]
    return {row["property"]: row for row in matched_check(models)}


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_plain_model_and_its_upcycled_copy_are_matched(family, tmp_path):
    model = plain_model(family)
    model.save_pretrained(tmp_path / "plain")
    upcycle(model, "block").save_pretrained(tmp_path / "block")
    plain = json.loads((tmp_path / "plain" / "config.json").read_text())
    block = json.loads((tmp_path / "block" / "config.json").read_text())
    assert set(block) - set(plain)  # the upcycled config does carry fields the plain one lacks
    rows = statuses([tmp_path / "plain", tmp_path / "block"])
    arch = rows["architecture (config, residual fields aside)"]
    assert arch["status"] == "match", arch["values"]
    assert rows["parameters excluding AttnRes"]["status"] == "match"
    assert architecture(block)["family"] == architecture(plain)["family"] == family
    # not trained by `attnres train`: its tokens and data are not recorded, every recorded property agrees
    assert matched_verdict(list(rows.values())).startswith("matched where recorded (not recorded: tokens trained")


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers"])
def test_a_real_architecture_difference_is_a_mismatch(family, field, tmp_path):
    """The upcycled copy of another shape: its field is named, though the other's residual fields differ too."""
    if family == "kimi_linear" and field == "num_hidden_layers":
        pytest.skip("Kimi Linear's layer_types fixes its layer count")
    plain = plain_model(family)
    plain.save_pretrained(tmp_path / "plain")
    value = getattr(plain.config, field) * 2 if field == "hidden_size" else getattr(plain.config, field) - 1
    upcycle(plain_model(family, **{field: value}), "block").save_pretrained(tmp_path / "block")
    arch = statuses([tmp_path / "plain", tmp_path / "block"])["architecture (config, residual fields aside)"]
    assert arch["status"] == "MISMATCH" and field in arch["values"]
    verdict = matched_verdict(list(statuses([tmp_path / "plain", tmp_path / "block"]).values()))
    assert verdict.startswith("not matched (differing: ") and "architecture" in verdict


def test_another_family_of_the_same_shape_is_a_mismatch(tmp_path):
    source_model("llama").save_pretrained(tmp_path / "llama")
    upcycle(source_model("qwen2"), "block").save_pretrained(tmp_path / "qwen2")
    arch = statuses([tmp_path / "llama", tmp_path / "qwen2"])["architecture (config, residual fields aside)"]
    assert arch["status"] == "MISMATCH" and "family" in arch["values"]


def test_an_attn_res_setting_outside_the_residual_is_a_mismatch(tmp_path):
    """Kimi K3's switches are fields the AttnRes config adds but not the residual: a plain config reads as their
    default (what upcycling writes), a changed one is a difference."""
    from hf_attnres.evaluation.provenance import family_fields

    own, attn_res, residual = family_fields("kimi_linear")
    extra = sorted(set(attn_res) - set(own) - residual)
    assert extra and "attn_res_mode" in residual and "attn_res_key_norm" in residual
    field = next(k for k in extra if isinstance(attn_res[k], bool))
    plain = architecture({"model_type": "kimi_linear"})
    changed = architecture({"model_type": "kimi_linear_attnres", field: not attn_res[field]})
    assert plain[field] == attn_res[field] and changed[field] != plain[field]


def test_the_verdict_says_matched_only_when_every_property_agrees():
    rows = [dict(property=p, values=[1, 1], status="match") for p in ("tokens trained", "tokenizer")]
    assert matched_verdict(rows) == "matched"
    rows[0]["status"] = "unknown"
    assert matched_verdict(rows) == "matched where recorded (not recorded: tokens trained)"
    rows[1]["status"] = "MISMATCH"
    assert matched_verdict(rows) == "not matched (differing: tokenizer)"
