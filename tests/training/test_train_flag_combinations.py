"""`attnres train` refuses flags the model's residual mode makes meaningless, the mode coming from
--attn-res, --config or --model-size: one line naming both, before any model is built (hf_attnres/training/loop.py
`check_mode_flags`). The CLI-level combinations are in tests/cli/test_flag_combinations.py."""
import pytest

from hf_attnres.training.args import SetupError
from hf_attnres.utils.tiny import tiny_config
from tests.helpers.train_fixtures import train_args


def full_config(tmp_path):
    path = tmp_path / "full.json"
    tiny_config("full", num_layers=2, vocab_size=512, family="kimi_linear").to_json_file(str(path))
    return path


@pytest.mark.parametrize(("flags", "refused", "other"), [
    (dict(attn_res="full", block_size=2), "--block-size 2", "full model (--attn-res full)"),
    (dict(attn_res="standard", block_size=2), "--block-size 2", "standard model (--attn-res standard)"),
    (dict(attn_res="standard", res_proj_lr=1e-2), "--res-proj-lr", "standard model (--attn-res standard)"),
    (dict(attn_res="standard", res_proj_weight_decay=0.0), "--res-proj-weight-decay",
     "standard model (--attn-res standard)"),
    ("config", "--block-size 3", "full model (--config"),
    (dict(attn_res="block", block_size=5), "--block-size 5", "exceeds the model's 4 decoder layers"),
    (dict(attn_res="block", block_size=1000), "--block-size 1000", "(--attn-res block)"),
])
def test_mode_makes_flag_meaningless(data, train, tmp_path, flags, refused, other):
    if flags == "config":
        flags = dict(model_size=None, config=full_config(tmp_path), block_size=3)
    out = tmp_path / "run"
    with pytest.raises(SetupError) as error:
        train(train_args(data, out, **flags))
    assert refused in str(error.value) and other in str(error.value), error.value
    assert not out.exists()  # refused before any work


def test_fine_tune_that_would_keep_no_model_is_refused(data, train, tmp_path):
    """--init-from keeps final weights only unless asked for checkpoints: --no-final-model then keeps nothing."""
    quick = dict(max_steps=1, eval_every=0, diagnostics_every=0)
    train(train_args(data, tmp_path / "base", **quick, save_every=0))
    out = tmp_path / "run"
    flags = dict(model_size=None, init_from=tmp_path / "base" / "final", save_every=None, no_final_model=True, **quick)
    with pytest.raises(SetupError) as error:
        train(train_args(data, out, **flags))
    assert "--no-final-model" in str(error.value) and "--checkpoints resumable" in str(error.value), error.value
    assert not out.exists()
    train(train_args(data, out, **flags, checkpoints="resumable"))
    assert (out / "checkpoints" / "step-00000001").is_dir() and not (out / "final").exists()
