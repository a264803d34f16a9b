"""scripts/setup_llama_cpp.sh's own logic, with a stand-in `python3` (its pip download / wheel / install), so the
build path runs in seconds: the flags it builds with, the cache it fills, what it leaves behind, its exit status.
(The real build runs once per machine in scripts/run_tests.sh; a bug after it, such as a failing EXIT trap under
`set -e`, once ended a fresh CI run with exit 1 and no message.)"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup_llama_cpp.sh"
WHEEL = "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"

# a stand-in for `python3 -m pip ...`: download writes an sdist laid out as llama-cpp-python's, wheel writes a wheel
# and the CMAKE_ARGS it was given, install records its arguments; every call is logged
FAKE_PYTHON = r"""#!/usr/bin/env bash
set -eu
echo "$*" >> "$FAKE_LOG"
arg_after() { local flag=$1; shift; while [ $# -gt 0 ]; do [ "$1" = "$flag" ] && { echo "$2"; return; }; shift; done; }
case "$3" in
  download)
    out=$(arg_after -d "$@"); src=$(mktemp -d); root=$src/llama_cpp_python-0.3.36/vendor/llama.cpp
    mkdir -p "$root/conversion" "$root/gguf-py/gguf" "$root/models/templates" "$out"
    touch "$root/convert_hf_to_gguf.py" "$root/conversion/kimi_k3.py" "$root/gguf-py/gguf/__init__.py" \
          "$root/models/templates/kimi.jinja"
    tar -czf "$out/llama_cpp_python-0.3.36.tar.gz" -C "$src" llama_cpp_python-0.3.36 ;;
  wheel) out=$(arg_after -w "$@"); echo "$CMAKE_ARGS" > "$FAKE_LOG.cmake"; touch "$out/WHEEL_NAME" ;;
  install) ;;
  *) exit 9 ;;
esac
""".replace("WHEEL_NAME", WHEEL)


def run_setup(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", ATTNRES_LLAMA_CPP_CACHE=str(tmp_path / "cache"),
               FAKE_LOG=str(tmp_path / "calls.log"))
    return subprocess.run(["bash", str(SETUP), *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_first_build_fills_the_keyed_cache_installs_and_exits_0(tmp_path):
    run = run_setup(tmp_path, "--install")
    assert run.returncode == 0, run.stderr
    cache = Path(run.stdout.strip().splitlines()[-1])
    assert cache.parent == tmp_path / "cache" and cache.name.startswith("0.3.36-")
    assert (cache / WHEEL).is_file() and (cache / "llama.cpp" / "convert_hf_to_gguf.py").is_file()
    assert (cache / "llama.cpp" / "models" / "templates" / "kimi.jinja").is_file()
    flags = (tmp_path / "calls.log.cmake").read_text().split()
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags  # never -march=native: no AMX code paths
    assert not any("AMX" in flag or "AVX512" in flag for flag in flags)
    assert (cache / "cmake-args").read_text().split() == flags
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache.name]  # no .build-* folder left behind
    installs = [line for line in (tmp_path / "calls.log").read_text().splitlines() if " install " in f" {line} "]
    assert "--force-reinstall" in installs[0] and installs[0].endswith(WHEEL)
    assert "built in" in run.stderr and "building llama-cpp-python 0.3.36 once" in run.stderr


def test_a_second_run_reuses_the_cache_and_where_builds_nothing(tmp_path):
    first = run_setup(tmp_path)
    (tmp_path / "calls.log").unlink()
    where = run_setup(tmp_path, "--where")
    again = run_setup(tmp_path)
    assert where.returncode == again.returncode == 0
    assert where.stdout == again.stdout == first.stdout
    assert not (tmp_path / "calls.log").exists()  # neither called pip
