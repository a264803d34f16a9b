"""A saved folder carries every module the model needs (flat, relative imports) and loads with
`trust_remote_code=True` where attnres and triton are not installed: from the folder and the way a Hub repo loads."""
import ast
import sys

import pytest
import torch

from attnres.core.remote_code import code_modules, flat_name, flat_source, write_code_files
from tests.helpers.model_factory import random_ids, tiny_model
from tests.helpers.remote_loading import auto_map, fake_hub_repo, load_in_clean_process


def test_code_closure_holds_kernels_and_references():
    names = {flat_name(m) for m in code_modules()}
    assert {"modeling_kimi_linear_attnres", "configuration_kimi_linear_attnres", "core_inference", "conversion_mapping",
            "kernels_mix",
            "kernels_mix_naive", "kernels_mix_triton", "kernels_mix_kernels", "kernels_two_phase_triton"} <= names


@pytest.mark.parametrize("module", code_modules())
def test_flat_sources_import_only_flat_siblings(module):
    names = {flat_name(m) for m in code_modules()}
    for node in ast.walk(ast.parse(flat_source(module))):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and node.module in names, (module, node.module)  # what transformers resolves
        elif isinstance(node, ast.ImportFrom):
            assert not node.module.startswith("attnres"), (module, node.module)


def test_saved_modules_need_only_torch_and_transformers(tmp_path):
    """What transformers' loader demands of each module of a Hub folder (`check_imports`): its imports outside try
    blocks and `is_*_available()` checks. Optional packages (triton, accelerate) must stay behind such guards."""
    from transformers.dynamic_module_utils import get_imports

    write_code_files(tmp_path)
    allowed = {"torch", "transformers", "huggingface_hub", *sys.stdlib_module_names}
    for path in sorted(tmp_path.glob("*.py")):
        assert set(get_imports(path)) <= allowed, (path.name, set(get_imports(path)) - allowed)


def test_folder_loads_without_the_package(tmp_path):
    model = tiny_model("block", block_size=2, num_layers=3)  # KDA, KDA, MLA; MoE after the first layer
    model.save_pretrained(tmp_path / "model")
    assert (auto_map(tmp_path / "model")["AutoModelForCausalLM"]
            == "modeling_kimi_linear_attnres.KimiLinearAttnResForCausalLM")
    ids = random_ids()
    with torch.no_grad():
        expected = model(ids).logits
    local = load_in_clean_process(tmp_path / "model", ids, tmp_path / "local", tmp_path / "hf")
    torch.testing.assert_close(local["logits"], expected)
    repo = fake_hub_repo(tmp_path / "model", tmp_path / "hf" / "hub")
    hub = load_in_clean_process(repo, ids, tmp_path / "hub", tmp_path / "hf")
    torch.testing.assert_close(hub["logits"], expected)


def test_remote_copy_runs_its_triton_kernels_beside_the_package(tmp_path, monkeypatch):
    """A folder loaded as remote code in a process that also uses the package (or another folder): its Triton ops
    register under their own names. Triton's CPU interpreter stands in for the GPU (conftest)."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    model = tiny_model("block", block_size=2, num_layers=3, attn_res_backend="triton")
    ids = random_ids(seq=6)
    with torch.no_grad():
        expected = model(ids).logits  # the package's Triton ops are registered now
        model.save_pretrained(tmp_path / "model")
        # the Auto classes prefer the registered package class here: take the folder's class as they would elsewhere
        remote_class = get_class_from_dynamic_module("modeling_kimi_linear_attnres.KimiLinearAttnResForCausalLM",
                                                     tmp_path / "model")
        remote = remote_class.from_pretrained(tmp_path / "model").eval()
        assert type(remote).__module__.startswith("transformers_modules.")
        torch.testing.assert_close(remote(ids).logits, expected)
        copies = [m for name, m in sys.modules.items() if name.endswith(".kernels_mix_triton")]
        assert copies and all(m.OPS.startswith("attnres_") for m in copies)  # its kernels ran, under its own ops
        assert torch.ops.attnres.mix_fwd.default is not getattr(torch.ops, copies[0].OPS).mix_fwd.default
