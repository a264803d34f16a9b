#!/usr/bin/env bash
# Serving check on a CUDA GPU (issue 17): vLLM's (and, when installed, SGLang's) offline engine must generate, greedy,
# exactly what our `generate` does on an exported model.
#   1. a k3-small model (Kimi K3's text architecture, Block AttnRes) trained a few steps on GPT-2 BPE data
#   2. `attnres export --to kimi-linear` (vLLM: KimiLinearForCausalLM -> its kimi_k3 model) and `--to k3`
#      (KimiK3ForConditionalGeneration: vLLM and SGLang)
#   3. per export and engine: greedy 20 tokens on a few prompts vs KimiLinearAttnResForCausalLM.generate on the GPU
# Needs: pip install vllm (and sglang to check it too). Results: ${OUT:-serve_gpu}/serve.json, a log per step.
# Usage: bash scripts/serve_gpu.sh [outdir]      Exit 1 when any engine differs from ours, 2 when none could run.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-serve_gpu}}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'serve_gpu.sh: no CUDA device, nothing run')"
python3 -c "import vllm" || { echo "serve_gpu.sh: vllm is not installed (pip install vllm)"; exit 2; }
mkdir -p "$out"

echo "== 1. train k3-small briefly" | tee "$out/train.log"
python3 scripts/prepare_data.py --seq-len 64 --output-dir "$out/data" 2>&1 | tail -n 3 | tee -a "$out/train.log"
python3 scripts/train.py --data "$out/data" --model-size k3-small --max-steps 40 --output-dir "$out/run" \
    --no-tensorboard 2>&1 | tail -n 3 | tee -a "$out/train.log"

echo "== 2. export" | tee "$out/export.log"
for to in kimi-linear k3; do
    python3 -m hf_attnres export "$out/run/final" "$out/export-$to" --to "$to" --verify --force --no-progress \
        2>&1 | tee -a "$out/export.log"
done

echo "== 3. engines vs generate" | tee "$out/serve.log"
OUT_DIR="$out" python3 - <<'EOF' 2>&1 | tee -a "$out/serve.log"
import gc, json, os, sys
import torch
from transformers import AutoTokenizer
from hf_attnres import KimiLinearAttnResForCausalLM

out = os.environ["OUT_DIR"]
prompts = ["the king walks over the river", "a queen sees the light of the", "The history of the city"]
tokens = 20

def ours(folder):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = KimiLinearAttnResForCausalLM.from_pretrained(folder, dtype=torch.float32).cuda().eval()
    result = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.cuda()
        with torch.no_grad():
            result.append(model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)[0, ids.shape[1]:].tolist())
    del model
    return result

def vllm_engine(folder):
    from vllm import LLM, SamplingParams
    llm = LLM(model=folder, dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.3)
    params = SamplingParams(temperature=0.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True)
    result = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    del llm
    return [list(r) for r in result]

def sglang_engine(folder):
    import sglang
    engine = sglang.Engine(model_path=folder, dtype="float32", disable_cuda_graph=True, mem_fraction_static=0.3)
    params = {"temperature": 0.0, "max_new_tokens": tokens, "min_new_tokens": tokens, "ignore_eos": True}
    result = [o["output_ids"] for o in engine.generate(prompts, params)]
    engine.shutdown()
    return result

report, differs, ran = {}, False, 0
for to, engines in (("kimi-linear", {"vllm": vllm_engine}), ("k3", {"vllm": vllm_engine, "sglang": sglang_engine})):
    folder = f"{out}/export-{to}"
    want = ours(folder)
    for name, engine in engines.items():
        try:
            got = engine(folder)
        except Exception as error:  # an engine missing or refusing the layout is a result too: recorded, not fatal
            report[f"{name} {to}"] = f"did not run: {type(error).__name__}: {error}"[:2000]
            print(f"{name} --to {to}: did not run: {error!r}"[:2000])
            continue
        ran += 1
        same = got == want
        differs |= not same
        report[f"{name} {to}"] = {"identical": same, "ours": want, name: got}
        print(f"{name} --to {to}: greedy {tokens} tokens x {len(prompts)} prompts {'IDENTICAL' if same else 'DIFFER'}")
        gc.collect(); torch.cuda.empty_cache()
json.dump(report, open(f"{out}/serve.json", "w"), indent=1)
sys.exit(1 if differs else 0 if ran else 2)
EOF
