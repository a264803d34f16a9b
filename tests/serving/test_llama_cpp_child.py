"""The serving tests' child process: a llama.cpp abort becomes one clear failure, not the end of the pytest process.

The fake workers stand in for llama.cpp ending its process the way it does on an AMX Xeon built natively (upstream
llama.cpp issues #18099, #19184): a GGML_ASSERT line on stderr, then abort().
"""
from __future__ import annotations

import pytest

from tests.helpers.llama_cpp_runner import LlamaCppCrash, cache_dir, crash_message, run_llama_cpp

ASSERT_LINE = ("/vendor/llama.cpp/ggml/src/ggml-backend.cpp:1294: GGML_ASSERT(*cur_backend_id != -1) failed")


def fake_worker(tmp_path, body: str):
    worker = tmp_path / "worker.py"
    worker.write_text(f"import os, sys\n{body}\n")
    return worker


def test_an_abort_in_llama_cpp_fails_with_its_assert_line(tmp_path):
    worker = fake_worker(tmp_path, f"print('load_tensors: loading model', file=sys.stderr)\n"
                                   f"print({ASSERT_LINE!r}, file=sys.stderr, flush=True)\nos.abort()")
    with pytest.raises(LlamaCppCrash) as crash:
        run_llama_cpp(tmp_path / "model.gguf", ["a"], [[1]], 0, tmp_path / "work", worker=worker)
    assert "SIGABRT" in str(crash.value) and "GGML_ASSERT(*cur_backend_id != -1) failed" in str(crash.value)
    # the test process is alive to say so: this line runs


def test_a_worker_that_exits_without_a_result_is_a_crash_too(tmp_path):
    worker = fake_worker(tmp_path, "print('llama_model_load: error loading model', file=sys.stderr)\nsys.exit(3)")
    with pytest.raises(LlamaCppCrash, match="exit 3.*error loading model"):
        run_llama_cpp(tmp_path / "model.gguf", ["a"], [[1]], 0, tmp_path / "work", worker=worker)


def test_crash_message_without_output_still_says_how_it_ended():
    assert crash_message(-4, "") == "llama.cpp ended its process (killed by SIGILL): no message"


def test_the_worker_returns_what_it_computed(tmp_path):
    worker = fake_worker(tmp_path, "import json, numpy as np\nrequest = json.load(open(sys.argv[1]))\n"
                                   "np.savez(sys.argv[2], tokens_0=np.array(request['ids'][0]))")
    result = run_llama_cpp(tmp_path / "model.gguf", ["a"], [[5, 6]], 0, tmp_path / "work", worker=worker)
    assert result["tokens_0"].tolist() == [5, 6]


def test_the_cache_folder_is_keyed_by_the_build_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNRES_LLAMA_CPP_CACHE", str(tmp_path))
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    default = cache_dir()
    monkeypatch.setenv("CMAKE_ARGS", "-DLLAMA_CURL=OFF -DGGML_NATIVE=ON")
    native = cache_dir()
    assert default.parent == native.parent == tmp_path
    assert default != native and default.name.startswith("0.3.36-")
    assert not any(tmp_path.iterdir()), "--where builds nothing"
