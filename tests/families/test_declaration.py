"""A family's declaration (hf_attnres/families/declaration.py): each way a layer may differ from Llama's is data that
the
generator writes and the core runs. A test declaration on Llama's classes that uses every such field generates a model
that reads its mixes through the declared norms, ends each sub-layer's output with the declared module, embeds with
the declared class and scale, and refuses the declared config field; a malformed field is one error naming it."""
import importlib
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers.models.gemma3.modeling_gemma3 import Gemma3TextScaledWordEmbedding

from hf_attnres.families.registry import declaration
from hf_attnres.utils import modular
from tests.families.tiny import SHAPE, random_ids
from tests.helpers.generated_package import forget_package, write_package

LLAMA_DECLARATION = Path(modular.__file__).parents[1] / "families" / "llama" / "modular_llama_attnres.py"
PROBE_FIELDS = """    input_norms=("post_attention_layernorm", "input_layernorm"),
    output_modules=("input_layernorm", "post_attention_layernorm"),
    embedding=Gemma3TextScaledWordEmbedding, embedding_scale="sqrt_hidden_size",
    refused_config_flags={"attention_bias": "a probe's reason"},
"""


def probe_declaration() -> str:
    """A test family: Llama's own declaration, renamed, its norm not fused, with every way a layer may differ declared
    (and the embedding class it names imported)."""
    text = LLAMA_DECLARATION.read_text()
    for old, new in (('name="Llama"', 'name="Probe"'),
                     ("fusable_norm=True", "fusable_norm=False"),  # the declared norms run as modules, seen by hooks
                     ("from transformers.models.llama", "from transformers.models.gemma3.modeling_gemma3 import "
                      "Gemma3TextScaledWordEmbedding\nfrom transformers.models.llama")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    head, tail = text.rsplit("\n)\n", 1)  # the Family(...) call closes last
    assert "FAMILY = Family(" in head and not tail.strip()
    return head + "\n" + PROBE_FIELDS + ")\n"


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The probe family generated into a package of its own, imported: (config class, causal LM class, texts)."""
    families = tmp_path / "families"
    (families / "probe").mkdir(parents=True)
    (families / "probe" / "modular_probe_attnres.py").write_text(probe_declaration())
    monkeypatch.setattr(modular, "FAMILIES_DIR", families)
    texts = modular.generate("probe")
    write_package(tmp_path, "probe_family_package", texts, monkeypatch)
    yield (importlib.import_module("probe_family_package.configuration_probe_attnres").ProbeAttnResConfig,
           importlib.import_module("probe_family_package.modeling_probe_attnres").ProbeAttnResForCausalLM, texts)
    forget_package("probe_family_package")


def test_the_generated_files_pass_the_linter_rules_the_families_keep(probe):
    _, _, texts = probe
    modeling = texts["modeling_probe_attnres.py"]
    # one name that fits the line stays on one line, as ruff's isort writes it
    assert "from transformers.models.gemma3.modeling_gemma3 import Gemma3TextScaledWordEmbedding\n" in modeling
    assert modeling.index("models.gemma3") < modeling.index("models.llama")  # isort's order
    assert all(len(line) <= modular.LINE_LENGTH for text in texts.values() for line in text.splitlines())


def test_the_declared_norms_read_the_mixes_and_the_declared_modules_end_each_output(probe):
    config_class, model_class, _ = probe
    torch.manual_seed(0)
    model = model_class(config_class(**SHAPE, attn_res_mode="block", attn_res_block_size=2)).eval()
    layer = model.model.layers[1]
    calls = []
    for name in ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp"):
        layer._modules[name].register_forward_hook(lambda module, args, out, name=name: calls.append(name))
    with torch.no_grad():
        logits = model(random_ids()).logits
    assert torch.isfinite(logits).all()
    # attention mix read by post_attention_layernorm, its output ended by input_layernorm; then the MLP's the other way
    assert calls == ["post_attention_layernorm", "self_attn", "input_layernorm", "input_layernorm", "mlp",
                     "post_attention_layernorm"]


def test_the_declared_embedding_is_built_with_its_scale(probe):
    config_class, model_class, _ = probe
    model = model_class(config_class(**SHAPE, attn_res_mode="block", attn_res_block_size=2)).eval()
    embedding = model.model.embed_tokens
    assert type(embedding) is Gemma3TextScaledWordEmbedding
    ids = random_ids()
    with torch.no_grad():
        assert torch.allclose(embedding(ids), embedding.weight[ids] * math.sqrt(SHAPE["hidden_size"]))


def test_the_declared_config_flag_is_refused_with_its_reason(probe):
    config_class, _, _ = probe
    assert config_class(**SHAPE, attention_bias=False).attention_bias is False
    with pytest.raises(ValueError, match=r"^attention_bias=True is not supported with AttnRes: a probe's reason$"):
        config_class(**SHAPE, attention_bias=True)


@pytest.mark.parametrize("field, value, named", [
    ("input_norms", ("input_layernorm",), "input_norms must name two modules"),
    ("output_modules", ("a", "b", "c"), "output_modules must name two modules"),
    ("output_modules", (1, 2), "output_modules must name two modules"),
    ("embedding_scale", "sqrt_vocab_size", "embedding_scale must be one of"),
])
def test_a_malformed_field_is_one_error_naming_it(field, value, named):
    with pytest.raises(ValueError, match=f"^Family Gemma3Text: {named}"):
        replace(declaration("gemma3_text"), **{field: value})


def test_a_scale_without_an_embedding_class_is_refused():
    with pytest.raises(ValueError, match="embedding_scale needs an `embedding` class"):
        replace(declaration("llama"), embedding_scale="sqrt_hidden_size")


def test_gemma3_declares_its_differences_as_data():
    family = declaration("gemma3_text")
    assert family.output_modules == ("post_attention_layernorm", "post_feedforward_layernorm")
    assert family.input_norms == ("input_layernorm", "pre_feedforward_layernorm")
    assert family.rotary_per_layer_type and family.embedding_scale == "sqrt_hidden_size"
    assert hash(family) == hash(declaration("gemma3_text"))  # the refused flags' dict keeps the declaration hashable
