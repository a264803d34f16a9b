"""LoRA fine-tuning of an AttnRes model of any family with PEFT: attention and MLP projections, Kimi Linear's MoE
experts (3-D parameters, via target_parameters) and the AttnRes pseudo-queries (*_res_proj), then save, reload and
merge.

  python examples/finetune_peft_lora.py MODEL_DIR OUTPUT_DIR
Writes OUTPUT_DIR/adapter (the LoRA adapter) and OUTPUT_DIR/merged (a full model with the adapter merged in).
"""
import argparse

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_attnres  # noqa: F401  registers every family's Auto classes: a folder loads without trust_remote_code

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("model_dir")
parser.add_argument("output_dir")
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(args.model_dir, trust_remote_code=True)
experts = ["experts.gate_up_proj", "experts.down_proj"]                  # Kimi Linear's routed experts' 3-D weights
lora = LoraConfig(
    r=8, lora_alpha=16, task_type="CAUSAL_LM",
    target_modules=["q_proj", "k_proj", "v_proj", "kv_b_proj", "o_proj",  # attention (MLA: q/kv_b/o; others q/k/v/o)
                    "qkv_proj", "gate_up_proj",                           # Phi-3's fused attention input and MLP
                    "gate_proj", "up_proj", "down_proj",                  # dense and shared-expert MLPs
                    "self_attention_res_proj", "mlp_res_proj", "output_attn_res_proj"],  # AttnRes pseudo-queries
    target_parameters=[name for name in experts if any(n.endswith(name) for n, _ in model.named_parameters())],
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()

batch = tokenizer(["the river runs under the stone bridge", "a queen sees the light of the house"],
                  return_tensors="pt", padding=True)
labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
model.train()
for step in range(args.steps):
    loss = model(**batch, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")

model.eval()
with torch.no_grad():
    tuned = model(**batch).logits
model.save_pretrained(f"{args.output_dir}/adapter")

# Reload: the base model plus the saved adapter gives the same logits; merging folds the adapter into the weights
base = AutoModelForCausalLM.from_pretrained(args.model_dir, trust_remote_code=True)
reloaded = PeftModel.from_pretrained(base, f"{args.output_dir}/adapter").eval()
merged = reloaded.merge_and_unload()
with torch.no_grad():
    torch.testing.assert_close(merged(**batch).logits, tuned, rtol=1e-4, atol=1e-4)
merged.save_pretrained(f"{args.output_dir}/merged")
tokenizer.save_pretrained(f"{args.output_dir}/merged")
print("adapter reloaded and merged: same logits")
