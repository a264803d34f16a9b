#!/usr/bin/env bash
# Fetch, build and cache llama.cpp (through llama-cpp-python's sdist, which vendors it) for the serving tests.
#
# The CPU build takes minutes (measured 2026-12-03 with the flags below: 382 s wall on an idle 2-core machine, 3,542 s
# on a loaded one; a 24 MB wheel), so it is done once and cached:
#   $ATTNRES_LLAMA_CPP_CACHE (default ~/.cache/attnres/llama-cpp/<version>-<flags key>/)
#     llama_cpp_python-<version>-*.whl   the built wheel (pip install it; the tests import llama_cpp)
#     llama.cpp/                         llama.cpp's own converter: convert_hf_to_gguf.py, conversion/, gguf-py/,
#                                        models/templates/ (the K3 converter adds its chat template from there)
#     cmake-args                         the CMAKE_ARGS the wheel was built with
# A rerun with the cache in place does nothing. A failed build leaves no cache (built in a temporary folder, renamed
# at the end) and exits non-zero, so scripts/run_tests.sh stops instead of the serving test skipping.
#
# Why not llama.cpp's default build: GGML_NATIVE=ON compiles for the build machine's CPU (-march=native). On an Intel
# Xeon with AMX that puts the weights in the AMX extra buffer type, and an op that buffer type does not support finds
# no backend: loading an f16 GGUF of a K3 AttnRes model aborts the process with
# `ggml-backend.cpp: GGML_ASSERT(*cur_backend_id != -1) failed` (upstream llama.cpp issues #18099 and #19184; their
# reporters got past it with a build without the AMX code paths). A native wheel also crashes with SIGILL on a CPU
# that lacks the build machine's instructions, and our machines do not all have the same CPU. So the build names its
# instruction sets explicitly (AVX2/FMA/F16C: every x86-64 machine of ours has them; no AVX-512, no AMX), and the
# cache key holds the flags, so a wheel built with other flags is never picked up.
#
# Usage: scripts/setup_llama_cpp.sh [--install | --where]
#   --install  also pip-install the cached wheel (replacing any other llama-cpp-python build in this environment)
#   --where    print the cache folder for the current flags and exit (builds nothing)
# CMAKE_ARGS overrides the flags (and so the cache key); LLAMA_CPP_PYTHON_VERSION the version.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"   # the first release whose llama.cpp has the kimi-k3 graph
DEFAULT_ARGS="-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
if [ "$(uname -m)" != "x86_64" ]; then
    DEFAULT_ARGS="-DLLAMA_CURL=OFF"   # the x86 ISA flags mean nothing elsewhere; llama.cpp's defaults for that CPU
fi
ARGS="${CMAKE_ARGS:-$DEFAULT_ARGS}"
KEY="$(printf '%s\n%s\n' "$(uname -m)" "$ARGS" | sha256sum | cut -c1-12)"
CACHE="${ATTNRES_LLAMA_CPP_CACHE:-$HOME/.cache/attnres/llama-cpp}/$VERSION-$KEY"

if [ "${1:-}" = "--where" ]; then
    echo "$CACHE"
    exit 0
fi

if ! ls "$CACHE"/llama_cpp_python-*.whl >/dev/null 2>&1 || [ ! -d "$CACHE/llama.cpp/models/templates" ]; then
    mkdir -p "$(dirname "$CACHE")"
    WORK="$(mktemp -d "$(dirname "$CACHE")/.build-$VERSION.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
    echo "setup_llama_cpp: building llama-cpp-python $VERSION once (CPU, $JOBS jobs; measured 6.4 min on an idle" \
         "2-core machine, about an hour on a loaded one); cached in $CACHE" >&2
    echo "setup_llama_cpp: CMAKE_ARGS=$ARGS" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK/sdist"
    SDIST="$(ls "$WORK"/sdist/llama_cpp_python-*.tar.gz)"
    # The converter is Python: only these pieces of the vendored tree are needed to run it.
    tar -xzf "$SDIST" -C "$WORK" --strip-components=3 --wildcards \
        "*/vendor/llama.cpp/convert_hf_to_gguf.py" "*/vendor/llama.cpp/conversion/*" "*/vendor/llama.cpp/gguf-py/*" \
        "*/vendor/llama.cpp/models/templates/*"
    mkdir -p "$WORK/out/llama.cpp"
    mv "$WORK/convert_hf_to_gguf.py" "$WORK/conversion" "$WORK/gguf-py" "$WORK/models" "$WORK/out/llama.cpp/"
    # A heartbeat while pip builds quietly: a silent half hour looks like a hang.
    started=$(date +%s)
    # (its sleep runs in the background and is killed with it: an orphaned sleep would hold our stderr open)
    ( trap 'kill $! 2>/dev/null; exit 0' TERM
      while :; do sleep 60 & wait $!; echo "setup_llama_cpp: still building ($(( ($(date +%s) - started) / 60 )) min)" >&2
      done ) &
    heartbeat=$!
    # `|| true`: set -e holds inside the trap too, and the heartbeat is usually gone by then
    trap 'kill $heartbeat 2>/dev/null || true; rm -rf "$WORK"' EXIT
    CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
        python3 -m pip wheel --quiet --no-deps "$SDIST" -w "$WORK/out"
    kill $heartbeat 2>/dev/null || true
    echo "$ARGS" > "$WORK/out/cmake-args"
    echo "setup_llama_cpp: built in $(( $(date +%s) - started )) s" >&2
    rm -rf "$CACHE"
    mv "$WORK/out" "$CACHE"
fi

WHEEL="$(ls "$CACHE"/llama_cpp_python-*.whl | head -n 1)"
if [ "${1:-}" = "--install" ]; then
    # --force-reinstall: an environment may hold a native build of the same version (which pip would keep)
    python3 -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
    python3 -m pip install --quiet "numpy" "diskcache>=5.6.1" "jinja2>=2.11.3"   # llama_cpp's own runtime needs
fi
echo "$CACHE"
