"""Bad configs and bad inputs fail early with a message naming the field, not deep inside a kernel."""
import pytest
import torch

from hf_attnres import KimiLinearAttnResConfig
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.model_factory import random_ids, tiny_model


@pytest.mark.parametrize(
    "fields,named",
    [
        (dict(attn_res_mode="blocks"), "attn_res_mode"),
        (dict(attn_res_mode="block", attn_res_block_size=0), "attn_res_block_size"),
        (dict(attn_res_mode="block", attn_res_block_size=-2), "attn_res_block_size"),
        (dict(attn_res_backend="cuda"), "attn_res_backend"),
        (dict(num_hidden_layers=3, layer_types=["full_attention"] * 4), "layer_types"),
        (dict(num_hidden_layers=3, mlp_layer_types=["dense"] * 2), "mlp_layer_types"),
    ],
)
def test_invalid_config_names_the_field(fields, named):
    with pytest.raises(ValueError, match=named):
        KimiLinearAttnResConfig(**fields)


def test_mode_follows_k3_block_size():
    assert KimiLinearAttnResConfig(attn_res_block_size=12).attn_res_mode == "block"
    assert KimiLinearAttnResConfig().attn_res_mode == "standard"
    config = KimiLinearAttnResConfig(num_hidden_layers=93, attn_res_block_size=12)
    assert config.attn_res_num_blocks == 8  # 7 full blocks of 12 and a partial one of 9


def test_backend_environment_variable(monkeypatch):
    config = tiny_config("block", family="kimi_linear")
    monkeypatch.setenv("ATTNRES_BACKEND", "torch")
    assert config.resolved_backend() == "torch"
    monkeypatch.setenv("ATTNRES_BACKEND", "gpu")
    with pytest.raises(ValueError, match="ATTNRES_BACKEND"):
        config.resolved_backend()


def test_moonshot_fields_and_k3_text_config():
    moonshot = dict(
        num_hidden_layers=4,
        linear_attn_config={"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 16, "num_heads": 2},
        first_k_dense_replace=2,
        attn_res_block_size=2,
    )
    config = KimiLinearAttnResConfig.from_dict(moonshot)
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert config.mlp_layer_types == ["dense", "dense", "sparse", "sparse"]
    assert (config.linear_head_dim, config.linear_num_heads) == (16, 2)
    assert config.attn_res_mode == "block"
    k3 = KimiLinearAttnResConfig.from_dict({"model_type": "kimi_k3", "text_config": moonshot, "vision_config": {}})
    assert k3.layer_types == config.layer_types and k3.attn_res_block_size == 2


@pytest.fixture(scope="module")
def model():
    return tiny_model("block", 2)


def test_ids_outside_vocabulary(model):
    ids = random_ids()
    ids[0, 3] = model.config.vocab_size
    with pytest.raises(ValueError, match="vocab_size"):
        model(ids)
    with pytest.raises(ValueError, match="vocab_size"):
        model(-ids)


def test_empty_input(model):
    with pytest.raises(ValueError, match="empty input"):
        model(torch.zeros(1, 0, dtype=torch.long))


@pytest.mark.parametrize("shape", [(3, 12), (2, 5), (2, 12, 1)])
def test_attention_mask_of_wrong_shape(model, shape):
    with pytest.raises(ValueError, match="attention_mask"):
        model(random_ids(), attention_mask=torch.ones(shape, dtype=torch.long))


def test_ids_and_embeds_together(model):
    ids = random_ids()
    with pytest.raises(ValueError, match="exactly one"):
        model(ids, inputs_embeds=model.get_input_embeddings()(ids))
