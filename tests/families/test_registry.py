"""The registry is the family folders' declarations: every folder with a modular file is supported under its own
model_type, each declared norm policy is what its classes carry, and the refused families are not supported."""
import pytest

import hf_attnres  # noqa: F401  (registers the Auto classes)
from hf_attnres.families.registry import (
    DECLARATIONS,
    FAMILIES_DIR,
    REFUSED,
    SUPPORTED,
    declaration,
    family_classes,
    family_of_model_type,
    source_family_of,
)


def test_supported_is_every_declared_folder():
    folders = {path.parent.name for path in FAMILIES_DIR.glob("*/modular_*_attnres.py")}
    assert {package.rpartition(".")[2] for package, _, _ in SUPPORTED.values()} == folders
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma3_text", "kimi_linear", "phi3"} <= set(SUPPORTED)
    assert not set(SUPPORTED) & set(REFUSED)


@pytest.mark.parametrize("family", sorted(SUPPORTED))
def test_classes_carry_the_declared_norm_policy(family):
    declared = declaration(family)
    config_class, causal_lm = family_classes(family)
    assert config_class.model_type == f"{family}_attnres" and config_class.attn_res_family == family
    expected = declared.norm if declared.fusable_norm else None
    model = causal_lm.model_class
    assert model.fusable_norm is expected
    layer = model.decoder_layer_class if hasattr(model, "decoder_layer_class") else None
    if layer is not None:
        assert layer.fusable_norm is expected
    assert issubclass(causal_lm, declared.causal_lm) and issubclass(config_class, declared.config)


def test_a_wrapper_model_type_reads_as_its_family():
    assert family_of_model_type("kimi_k3") == "kimi_linear"
    assert source_family_of("kimi_k3", "standard") == "kimi_linear"
    assert {wrapper for _, family in DECLARATIONS.values() for wrapper in family.wrapper_model_types} == {"kimi_k3"}


def test_phi3_is_supported_and_a_refused_family_names_its_reason():
    assert family_of_model_type("phi3_attnres") == "phi3" and source_family_of("phi3") == "phi3"
    with pytest.raises(ValueError, match="parallel residual"):
        source_family_of("phi")


def test_the_k3_wrapper_reads_as_kimi_linears_config():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from hf_attnres import KimiLinearAttnResConfig

    assert CONFIG_MAPPING["kimi_k3"] is KimiLinearAttnResConfig  # transformers 5.23 ships no kimi_k3 of its own


@pytest.mark.parametrize("family", sorted(SUPPORTED))
@pytest.mark.parametrize("fuse", [True, False])
def test_the_mix_fuses_the_norm_exactly_where_the_declaration_allows(family, fuse):
    """Whether each mix point hands the reading RMSNorm's gain to its depth-mix module (the op a kernel mapping
    replaces), recorded at every mix module of the model."""
    import torch

    from hf_attnres.utils.tiny import tiny_config
    from tests.families.tiny import attn_res_model, random_ids

    if family == "kimi_linear":
        _, causal_lm = family_classes(family)
        model = causal_lm(tiny_config("block", attn_res_fuse_norm=fuse, attn_res_two_phase=False,
            family="kimi_linear")).eval()
    else:
        model = attn_res_model(family, "block", attn_res_fuse_norm=fuse, attn_res_two_phase=False)
    seen = []

    def recording(real):
        def forward(sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, *rest):
            seen.append(out_norm_weight is not None)
            return real(sources, query, norm_weight, eps, return_weights, out_norm_weight, *rest)
        return forward

    mixers = [module for name, module in model.named_modules() if name.endswith("attn_res_mix")]
    assert mixers
    for module in mixers:
        module.forward = recording(module.forward)
    with torch.no_grad():
        model(random_ids(), use_cache=False)
    assert seen and set(seen) == {fuse and declaration(family).fusable_norm}


def test_the_top_level_offers_every_familys_classes_alike():
    for family in SUPPORTED:
        config_class, causal_lm = family_classes(family)
        assert getattr(hf_attnres, config_class.__name__) is config_class
        assert getattr(hf_attnres, causal_lm.__name__) is causal_lm
        assert {config_class.__name__, causal_lm.__name__} <= set(hf_attnres.__all__) <= set(dir(hf_attnres))
    with pytest.raises(AttributeError, match="no attribute 'LlamaAttnResConfg'"):
        hf_attnres.LlamaAttnResConfg
