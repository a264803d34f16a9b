"""The fused C++ CPU kernel (kernels/mix/cpu_fused.py) against the eager PyTorch path (lean.py), beside the op's
contract against the reference shared with lean.py (tests/kernels/test_mix_pytorch_paths.py): threads, per-token
bits, the fallbacks (inputs it does not take, a failed build) and the model (training and inference) with backend
"cpp" against backend "torch". Tolerances: fp32 1e-5 forward / 1e-4 gradients (the kernel sums each reduction in 16
lanes: fp32 reassociation only); bf16 relative 2e-2 against the eager path.
"""
import warnings

import pytest
import torch

import hf_attnres.kernels.mix as mix_ops
from hf_attnres.kernels.mix import attn_res, attn_res_naive, cpu_fused, rms_norm_naive
from tests.helpers.cache import cache_of
from tests.helpers.kernel_cases import make_inputs
from tests.helpers.model_factory import random_ids, tiny_model


def test_the_kernel_builds_here():
    """CI has a compiler: a kernel that silently fails to build would leave every CPU mix on the eager path."""
    assert cpu_fused.load_extension() is not None


@pytest.fixture
def calls(monkeypatch):
    """Which implementation served each `attn_res` call: "cpp" or "lean"."""
    served = []
    fused, lean = mix_ops.CPU_KERNEL["run"], mix_ops.attn_res_lean
    monkeypatch.setitem(mix_ops.CPU_KERNEL, "run", lambda *a, **k: served.append("cpp") or fused(*a, **k))
    monkeypatch.setattr(mix_ops, "attn_res_lean", lambda *a, **k: served.append("lean") or lean(*a, **k))
    return served


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_the_eager_path_forward_and_backward(dtype):
    """The kernel against lean.py, the path it replaces, at a model-like width: differences are rounding only."""
    sources, query, norm_weight, out_norm = make_inputs(4, 256, dtype, shape=(3, 7))
    params = [*sources, query, norm_weight, out_norm]
    outs, grads = {}, {}
    for backend in ("cpp", "torch"):
        outs[backend] = attn_res(sources, query, norm_weight, 1e-6, backend=backend, out_norm_weight=out_norm)
        grads[backend] = torch.autograd.grad(outs[backend].float().square().sum(), params)
    fp32 = dtype == torch.float32
    torch.testing.assert_close(outs["cpp"], outs["torch"], **(dict(rtol=1e-5, atol=1e-5) if fp32 else {}))
    for i, (got, want) in enumerate(zip(grads["cpp"], grads["torch"])):  # relative to each gradient's scale
        error = (got.float() - want.float()).abs().max() / want.float().abs().max()
        assert got.dtype == want.dtype and error <= (1e-4 if fp32 else 2e-2), (i, error.item())


def test_a_token_mixes_alike_whatever_the_batch():
    """Per-token arithmetic: a decode step's token gets the same bits as in the prefill (no shape-dependent path)."""
    sources, query, norm_weight, out_norm = make_inputs(3, 64, torch.float32, shape=(2, 9))
    with torch.no_grad():
        full = attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
        last = attn_res([s[:, -1:].contiguous() for s in sources], query, norm_weight, 1e-6, backend="cpp",
                        out_norm_weight=out_norm)
    assert torch.equal(full[:, -1:], last)


def test_threads_split_the_tokens_with_the_same_result():
    sources, query, norm_weight, out_norm = make_inputs(3, 64, torch.float32, shape=(4, 256))  # several chunks
    params = [*sources, query, norm_weight, out_norm]
    results = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            out = attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
            results.append((out, torch.autograd.grad(out.square().sum(), params)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0][0], results[1][0])  # the forward is per token: bit-identical
    for got, want in zip(results[1][1], results[0][1]):  # the parameter gradients sum per-thread partials
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


class Wrapped(torch.Tensor):
    """A tensor subclass: the kernel would return a plain tensor, so it takes none (the lean path keeps the type)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


UNTAKEN = ["float64", "mixed_dtypes", "non_contiguous", "norm_in_other_dtype", "norm_not_contiguous",
           "query_other_width", "shapes_differ", "subclass_source", "subclass_query", "negative_view", "empty_width"]


@pytest.mark.parametrize("case", UNTAKEN)
def test_inputs_the_kernel_does_not_take_run_the_eager_path(case, calls):
    """The kernel's own input check (`mix_fits`, in C++) refuses each, so the lean path serves the call and its result
    is the reference's (or the lean path's own error for inputs no path takes)."""
    sources, query, norm_weight, out_norm = make_inputs(3, 32, torch.float32)
    if case == "float64":
        sources = [s.double() for s in sources]
        out_norm = out_norm.double()
    elif case == "mixed_dtypes":
        sources = [sources[0].bfloat16(), *sources[1:]]
        out_norm = None
    elif case == "non_contiguous":
        sources = [s.transpose(0, 1) for s in sources]
    elif case == "norm_in_other_dtype":
        out_norm = out_norm.bfloat16()
    elif case == "norm_not_contiguous":
        out_norm = torch.ones(32, 2)[:, 0]
    elif case == "query_other_width":
        query = query.detach()[:16]
    elif case == "shapes_differ":
        sources = [sources[0], sources[1], sources[2].detach()[:, :2]]
    elif case == "subclass_source":
        sources = [sources[0].detach().as_subclass(Wrapped), *sources[1:]]
    elif case == "subclass_query":
        query = query.detach().as_subclass(Wrapped)
    elif case == "negative_view":
        sources = [torch._neg_view(sources[0].detach()), *sources[1:]]
    elif case == "empty_width":
        sources, query, norm_weight, out_norm = make_inputs(3, 0, torch.float32)
    assert not cpu_fused.fits(sources, query, norm_weight, out_norm)
    if case in ("query_other_width", "shapes_differ"):  # no path takes these: the lean path's error, not a crash
        with pytest.raises(RuntimeError):
            attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
        assert calls == ["lean"]
        return
    out = attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
    assert calls == ["lean"]
    assert torch.equal(out, attn_res(sources, query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm))


def test_a_fake_tensor_is_never_read_by_the_kernel():
    """FakeTensor / DTensor dispatch through Python (`__torch_dispatch__`): no memory behind them to read."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        sources, query, norm_weight, out_norm = (mode.from_tensor(t) if isinstance(t, torch.Tensor) else
                                                 [mode.from_tensor(s) for s in t]
                                                 for t in make_inputs(3, 32, torch.float32))
        assert not cpu_fused.fits(sources, query, norm_weight, out_norm)
        # and the kernel's own check, for a subclass that passes the Python type test
        assert not cpu_fused.load_extension().mix_fits(sources, query, norm_weight, out_norm)
        assert not cpu_fused.load_extension().mix_fits(sources[:1] * 2, query.as_subclass(torch.Tensor), norm_weight,
                                                       None)


@pytest.mark.parametrize("backend", ["cpp", "torch"])
def test_the_query_linears_weight_mixes_as_its_vector(backend):
    """A mix point hands over its `Linear(hidden, 1)` weight [1, hidden] as it is (no view at each call): the same
    output as the [hidden] query, and the gradient comes back in the weight's shape."""
    sources, query, norm_weight, out_norm = make_inputs(3, 32, torch.float32)
    weight = query.detach().reshape(1, -1).requires_grad_()
    outs, grads = [], []
    for q in (query, weight):
        out = attn_res(sources, q, norm_weight, 1e-6, backend=backend, out_norm_weight=out_norm)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), [q, norm_weight]))
    assert torch.equal(outs[0], outs[1])
    assert grads[1][0].shape == (1, 32)
    torch.testing.assert_close(grads[1][0][0], grads[0][0])
    torch.testing.assert_close(grads[1][1], grads[0][1])


def test_dispatch_auto_and_cpp_take_the_kernel_torch_the_eager_path(calls):
    sources, query, norm_weight, _ = make_inputs(2, 32, torch.float32)
    for backend in ("auto", "cpp", "torch"):
        attn_res(sources, query, norm_weight, 1e-6, backend=backend)
    assert calls == ["cpp", "cpp", "lean"]


def test_the_installed_package_registers_the_kernel():
    assert mix_ops.CPU_KERNEL == {"fits": cpu_fused.fits, "run": cpu_fused.attn_res_cpu}


def test_a_package_model_on_cpu_runs_the_registered_kernel(monkeypatch, calls):
    """`import hf_attnres` registered the C++ kernel with the dispatcher: a package model's CPU mixes take it."""
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)
    model = tiny_model("block", 2, num_layers=4)
    assert model.config.attn_res_backend == "auto"
    with torch.no_grad():
        model(random_ids(seq=8))
    assert calls and set(calls) == {"cpp"}


def test_with_no_kernel_registered_auto_takes_the_eager_path_and_cpp_warns_once(monkeypatch, calls):
    """A folder's generated copy of the kernels registers none: "auto" on CPU is the lean path, silently; "cpp" says
    once that the kernel comes with the package, and takes the lean path too."""
    monkeypatch.setattr(mix_ops, "CPU_KERNEL", {})
    monkeypatch.setitem(mix_ops._warned, "cpp", False)
    sources, query, norm_weight, out_norm = make_inputs(2, 32, torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        auto = attn_res(sources, query, norm_weight, 1e-6, backend="auto", out_norm_weight=out_norm)
    with pytest.warns(RuntimeWarning, match="backend 'cpp' has no fused CPU kernel here.*eager PyTorch path"):
        cpp = attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
    assert calls == ["lean", "lean", "lean"]
    eager = attn_res(sources, query, norm_weight, 1e-6, backend="torch", out_norm_weight=out_norm)
    assert torch.equal(auto, eager) and torch.equal(cpp, eager)


def test_a_registered_kernel_serves_auto_and_cpp_where_it_fits(monkeypatch):
    """`register_cpu_kernel` replaces the registration; `fits` decides per call, "torch" never asks it."""
    asked, ran = [], []
    monkeypatch.setattr(mix_ops, "CPU_KERNEL", {})
    mix_ops.register_cpu_kernel(lambda *inputs: asked.append(len(inputs)) or len(ran) < 1,
                                lambda *args: ran.append(len(args)) or "fused")
    sources, query, norm_weight, _ = make_inputs(2, 32, torch.float32)
    assert attn_res(sources, query, norm_weight, 1e-6, backend="auto") == "fused"
    assert isinstance(attn_res(sources, query, norm_weight, 1e-6, backend="cpp"), torch.Tensor)  # fits said no
    attn_res(sources, query, norm_weight, 1e-6, backend="torch")
    assert asked == [4, 4] and ran == [7]


def test_a_failed_build_warns_once_and_every_mix_takes_the_eager_path(monkeypatch, calls, tmp_path):
    import torch.utils.cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension 'attnres_mix_cpu': c++: not found")

    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", no_compiler)
    monkeypatch.setenv("ATTNRES_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setitem(cpu_fused._state, "tried", False)
    monkeypatch.setitem(cpu_fused._state, "module", None)
    sources, query, norm_weight, out_norm = make_inputs(2, 32, torch.float32)
    with pytest.warns(RuntimeWarning, match="could not be built .*c\\+\\+: not found.*eager PyTorch path"):
        out = attn_res(sources, query, norm_weight, 1e-6, backend="cpp", out_norm_weight=out_norm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        attn_res(sources, query, norm_weight, 1e-6, backend="auto", out_norm_weight=out_norm)
    assert calls == ["lean", "lean"]
    torch.testing.assert_close(out, rms_norm_naive(attn_res_naive(sources, query, norm_weight, 1e-6), out_norm, 1e-6))


def test_a_first_build_says_so_before_compiling_and_a_cached_one_is_silent(monkeypatch, tmp_path, caplog):
    """The first build takes minutes; a user must read why before they start, not face a stuck bar. The
    cache calls `compile_module` only when it has no verified build, so a cached load announces nothing."""
    import torch.utils.cpp_extension

    said_before = []

    def fake_build(name, *args, build_directory, **kwargs):
        said_before.append([r.getMessage() for r in caplog.records])  # what was logged when the compiler started
        return "module"

    monkeypatch.setattr(torch.utils.cpp_extension, "load_inline", fake_build)
    with caplog.at_level("WARNING", logger=cpu_fused.__name__):
        assert cpu_fused.compile_module("attnres_mix_test", tmp_path) == "module"
        assert len(said_before[0]) == 1 and "compiling the fused C++ CPU mix kernel" in said_before[0][0]
        assert "minute" in said_before[0][0] and str(tmp_path) in said_before[0][0]
        assert "is built (" in caplog.records[-1].getMessage()
        caplog.clear()
        monkeypatch.setattr(cpu_fused, "load_or_build", lambda prefix, key, build: "cached module")
        assert cpu_fused.build_extension() == "cached module"  # a verified build: loaded, nothing to announce
        assert caplog.records == []


def test_build_folder_is_keyed_and_movable(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNRES_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name, folder = cpu_fused.build_directory()
    assert name.startswith("attnres_mix_cpu_") and folder == tmp_path / "cache" / "attnres" / "torch_extensions" / name
    monkeypatch.setenv("ATTNRES_EXTENSIONS_DIR", str(tmp_path))
    assert cpu_fused.build_directory() == (name, tmp_path / name)
    changed = cpu_fused.cpp_source() + "// changed\n"
    monkeypatch.setattr(cpu_fused, "cpp_source", lambda: changed)
    assert cpu_fused.build_directory()[0] != name  # a changed kernel never loads a stale build


def loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids, use_cache=False).loss
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode,block_size", [("block", 2), ("full", 0)])
def test_model_training_step_cpp_equals_torch(mode, block_size, monkeypatch, calls):
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)
    model = tiny_model(mode, block_size, num_layers=4).train()
    ids = random_ids(seq=8)
    results = {}
    for backend in ("cpp", "torch"):
        model.config.attn_res_backend = backend
        results[backend] = loss_and_grads(model, ids)
    assert calls == ["cpp"] * 8 + ["lean"] * 8  # every mix point but the first (one source: no mix)
    (loss, grads), (ref_loss, ref_grads) = results["cpp"], results["torch"]
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and any("_res_proj" in name for name in grads)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode,block_size,dtype", [("block", 2, torch.float32), ("full", 0, torch.float32),
                                                   ("block", 2, torch.bfloat16)])
def test_model_prefill_and_decode_cpp_equals_torch(mode, block_size, dtype, monkeypatch, calls):
    monkeypatch.delenv("ATTNRES_BACKEND", raising=False)
    model = tiny_model(mode, block_size, num_layers=4, dtype=dtype)
    ids = random_ids(batch=2, seq=9)
    logits = {}
    for backend in ("cpp", "torch"):
        model.config.attn_res_backend = backend
        with torch.no_grad():
            prefill = model(ids[:, :8], use_cache=True)
            step = model(ids[:, 8:], cache=cache_of(prefill), use_cache=True)
        logits[backend] = (prefill.logits.float(), step.logits.float())
    assert calls.count("cpp") == calls.count("lean") > 0
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(logits["cpp"], logits["torch"], **tol)
