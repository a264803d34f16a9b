"""With fla installed on a CPU-only machine, transformers binds fla's Triton KDA kernels, which cannot take CPU
tensors. Up to transformers 5.24 hf_attnres routes CPU calls to transformers' PyTorch reference; from 5.25 transformers
routes them itself and hf_attnres patches nothing. A stand-in `fla` package that fails on CPU tensors, as the real one
does, makes the binding happen here without a GPU."""
import os
import subprocess
import sys
import textwrap

import torch

from hf_attnres.families.kimi_linear.kda_device_guard import transformers_routes_by_device
from tests.helpers.model_factory import random_ids, tiny_model

FAKE_KDA = '''
def _needs_cuda(q):
    if not q.is_cuda:
        raise RuntimeError("FAKE_FLA: Triton kernels need CUDA tensors")

def chunk_kda(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False, **kw):
    _needs_cuda(q)

def fused_recurrent_kda(q, k, v, g, beta, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, **kw):
    _needs_cuda(q)
'''


def run(code, fake_root):
    """Run `code` in a fresh interpreter that finds the stand-in `fla` first."""
    env = {**os.environ, "PYTHONPATH": str(fake_root)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env=env)


def test_model_runs_on_cpu_with_fla_bound(tmp_path):
    package = tmp_path / "fla" / "ops" / "kda"
    package.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text("")
    (tmp_path / "fla" / "ops" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(FAKE_KDA)

    model = tiny_model("block", 2)
    model.save_pretrained(tmp_path / "model")
    ids = random_ids()
    with torch.no_grad():
        torch.save({"ids": ids, "logits": model(ids, use_cache=False).logits}, tmp_path / "expected.pt")

    # 1. without hf_attnres, transformers' own KimiLinear is bound to the (fake) fla kernels: it fails on CPU where
    # transformers does not route by device, and runs where it does
    routes_itself = transformers_routes_by_device()
    plain = run(
        f"""
        import torch
        from transformers import KimiLinearConfig, KimiLinearForCausalLM
        config = KimiLinearConfig(**{{k: v for k, v in {model.config.to_dict()!r}.items()
                                       if not k.startswith("attn_res")
                                       and k not in ("model_type", "auto_map", "architectures")}})
        KimiLinearForCausalLM(config)(torch.load({str(tmp_path / "expected.pt")!r})["ids"])
        """,
        tmp_path,
    )
    if routes_itself:
        assert plain.returncode == 0 and "FAKE_FLA" not in plain.stderr, plain.stderr[-2000:]
    else:
        assert "FAKE_FLA" in plain.stderr, plain.stderr[-2000:]

    # 2. with hf_attnres, the binding is routed by device (by hf_attnres only where transformers does not) and the
    # model matches the fla-free run exactly
    ours = run(
        f"""
        import torch, hf_attnres
        from hf_attnres import KimiLinearAttnResForCausalLM
        from transformers.models.kimi_linear import modeling_kimi_linear as kimi
        patched = getattr(kimi.chunk_kimi_delta_attention, "attnres_device_routed", False)
        assert patched is {not routes_itself}, patched
        model = KimiLinearAttnResForCausalLM.from_pretrained({str(tmp_path / "model")!r}).eval()
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        with torch.no_grad():
            torch.testing.assert_close(model(expected["ids"], use_cache=False).logits, expected["logits"],
                                       rtol=0, atol=0)
            model.generate(expected["ids"], max_new_tokens=3, do_sample=False)  # decode path: recurrent kernel
        print("GUARD_OK")
        """,
        tmp_path,
    )
    assert "GUARD_OK" in ours.stdout, ours.stderr[-3000:]
