#!/usr/bin/env bash
# Install the public AttnRes implementations that `attnres bench-kernels` compares with into a folder of their own,
# never into the environment:
#   fla-core 0.6.0        fla.ops.attnres: fused_attnres (Triton, CUDA only) and naive_attnres (PyTorch)
#   flash-attn-res 0.1.12 two-phase Triton kernels (flash_attn_res.ops) and a PyTorch path (experimental/torch.py)
#   fast-attnres 2.1.0    attnres.attnres (Triton, CUDA BF16 only; its private multi-query launchers also run in the
#                         Triton interpreter on CPU); its import package is `attnres`, hence ours is `hf_attnres`
#   einops                fla's naive reference imports it (pure Python)
# Why a separate folder: with fla importable, transformers' Kimi Linear binds fla's kernels when its modeling module is
# imported and then fails on CPU. The benchmark puts this folder on sys.path inside its own process only, after
# transformers and attnres are imported (hf_attnres/bench/peers.py). --no-deps: torch and triton are the environment's.
#   $ATTNRES_PEERS (default ~/.cache/attnres/peers)/   the --target folder; a rerun with it in place does nothing
# A failed install leaves no folder (installed into a temporary folder, renamed at the end) and exits non-zero.
# Usage: scripts/setup_peers.sh        prints the folder (pass it to `attnres bench-kernels --peers-path`)
set -euo pipefail
SPECS="fla-core==0.6.0 flash-attn-res==0.1.12 fast-attnres==2.1.0 einops==0.8.2"
TARGET="${ATTNRES_PEERS:-$HOME/.cache/attnres/peers}"

if [ "$(cat "$TARGET/.specs" 2>/dev/null)" != "$SPECS" ]; then
    mkdir -p "$(dirname "$TARGET")"
    WORK="$(mktemp -d "$(dirname "$TARGET")/.peers.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    echo "setup_peers: pip install --target $TARGET $SPECS (once)" >&2
    # shellcheck disable=SC2086  # SPECS is a word list on purpose
    python3 -m pip install --quiet --no-deps --no-compile --disable-pip-version-check --root-user-action=ignore --target "$WORK/out" $SPECS
    echo "$SPECS" > "$WORK/out/.specs"
    rm -rf "$TARGET"
    mv "$WORK/out" "$TARGET"
fi
echo "$TARGET"
