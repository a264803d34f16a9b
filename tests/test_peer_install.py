"""hf-attnres and fast-attnres 2.1.0 installed side by side, as a user gets them with `pip install hf-attnres` and
`pip install fast-attnres`: fast-attnres' import package is `attnres` and its torch.library ops live in the `attnres`
namespace, so ours must own neither. Our wheel is built from a copy of the sources and installed with fast-attnres'
wheel from PyPI (both --no-deps: torch and triton are the running interpreter's) into one fresh venv
(tests/helpers/venv.py: it sees the running interpreter's packages, never the checkout). There, one interpreter
imports both, each from its own distribution's files, registers both packages' ops and runs ours; the two RECORD
files share no path."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.helpers.venv import build_wheel, make_venv, run

REPO = Path(__file__).resolve().parent.parent
FAST_ATTNRES = "fast-attnres==2.1.0"

# Run inside the venv, cwd outside the checkout, with TRITON_INTERPRET=1 (ours runs on CPU in the interpreter)
IN_VENV = textwrap.dedent("""
    import importlib.metadata as md
    import json
    import sys
    from pathlib import Path

    import torch

    import attnres
    import hf_attnres

    venv = Path(sys.argv[1]).resolve()
    theirs, ours = md.distribution("fast-attnres"), md.distribution("hf-attnres")

    def owned(dist):
        return {Path(dist.locate_file(f)).resolve() for f in dist.files}

    # each module from its own distribution's installed files
    assert Path(attnres.__file__).resolve() in owned(theirs), attnres.__file__
    assert Path(hf_attnres.__file__).resolve() in owned(ours), hf_attnres.__file__
    assert all(Path(m.__file__).resolve().is_relative_to(venv) for m in (attnres, hf_attnres))
    assert attnres.__version__ == "2.1.0" and callable(attnres.attnres)
    try:  # their public call refuses CPU tensors: a CUDA BF16 operator
        attnres.attnres([torch.zeros(2, 4, dtype=torch.bfloat16)] * 2, torch.zeros(4, dtype=torch.bfloat16))
        raise AssertionError("fast-attnres ran on CPU")
    except RuntimeError as error:
        assert "CUDA" in str(error), error

    # both packages' custom ops registered in one process (theirs need triton for the fixed-tail Triton ops)
    import attnres._kernels.fixed_tail
    import attnres._kernels.fixed_tail_sources
    import attnres._kernels.multiquery_ops
    from hf_attnres.kernels.mix import triton as mix_triton
    from hf_attnres.kernels.mix.naive import attn_res_naive
    from hf_attnres.kernels.two_phase import triton as two_phase_triton  # noqa: F401  registers its ops

    names = torch._C._dispatch_get_all_op_names()
    by_namespace = {ns: sorted(n for n in names if n.startswith(ns + "::")) for ns in ("attnres", "hf_attnres")}

    # ours, registered after theirs, still dispatch to our kernels: the interpreter runs them on CPU
    gen = torch.Generator().manual_seed(0)
    sources = [torch.randn(1, 4, 32, generator=gen) * (1 + j) for j in range(3)]
    query, gain = 0.5 * torch.randn(32, generator=gen), 1 + 0.2 * torch.randn(32, generator=gen)
    got, want = (mix(sources, query, gain, 1e-6) for mix in (mix_triton.attn_res_triton, attn_res_naive))
    diff = (got - want).abs().max()

    shared = sorted(str(p) for p in owned(theirs) & owned(ours))
    print(json.dumps(dict(ops=by_namespace, our_namespace=mix_triton.OPS, diff=float(diff), shared=shared,
                          their_top_level=theirs.read_text("top_level.txt").split(),
                          our_top_level=sorted({f.parts[0] for f in ours.files if f.parts[0].isidentifier()}))))
""")


@pytest.mark.slow
@pytest.mark.network  # pip-installs fast-attnres from the package index
def test_fast_attnres_and_hf_attnres_install_and_import_side_by_side(tmp_path):
    wheel = build_wheel(REPO, tmp_path)

    venv = tmp_path / "venv"
    python, _bin = make_venv(venv)
    # --ignore-installed: a copy the running interpreter has must not count as "already satisfied"
    pip = [str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--quiet",
           "--disable-pip-version-check", "--root-user-action=ignore"]
    run([*pip, "--no-index", str(wheel)])
    run([*pip, FAST_ATTNRES])

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    report = json.loads(run([str(python), "-c", IN_VENV, str(venv)], cwd=work, env=env).stdout.splitlines()[-1])

    assert report["shared"] == [], "files owned by both distributions (the second install overwrote the first's)"
    assert report["their_top_level"] == ["attnres"] and "attnres" not in report["our_top_level"], report
    assert report["our_namespace"] == "hf_attnres"
    theirs, ours = report["ops"]["attnres"], report["ops"]["hf_attnres"]
    assert {"attnres::_fixed_tail_forward_with_aux", "attnres::_fixed_tail_backward",
            "attnres::_fixed_tail_sources_forward_with_aux"} <= set(theirs), theirs
    assert {"hf_attnres::mix_fwd", "hf_attnres::mix_bwd"} <= set(ours), ours
    # every op of `attnres::` is one of fast-attnres' own (ours registers nothing there)
    assert all(name.split("::")[1].startswith(("_fixed_tail", "_multiquery")) for name in theirs), theirs
    assert report["diff"] < 1e-5, report
