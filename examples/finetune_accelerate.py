"""Fine-tune a Kimi Linear AttnRes model with a plain accelerate loop: no find_unused_parameters, no special cases.

  accelerate launch --multi_gpu --num_processes 2 examples/finetune_accelerate.py MODEL_DIR OUTPUT_DIR
  (on CPU, add --cpu to this script: Accelerator(cpu=True) makes the processes gloo DDP)
"""
import argparse

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM, AutoTokenizer

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("model_dir")
parser.add_argument("output_dir")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--cpu", action="store_true", help="force CPU (gloo) even with GPUs present")
args = parser.parse_args()

accelerator = Accelerator(cpu=args.cpu)
tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(args.model_dir, trust_remote_code=True)
texts = ["the river runs under the stone bridge", "a queen sees the light of the house"] * 4
batch = tokenizer(texts, return_tensors="pt", padding=True)
labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)  # no loss on padding

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
model.train()
shard = slice(accelerator.process_index, None, accelerator.num_processes)  # each process its own rows
for step in range(args.steps):
    loss = model(input_ids=batch["input_ids"][shard].to(accelerator.device),
                 attention_mask=batch["attention_mask"][shard].to(accelerator.device),
                 labels=labels[shard].to(accelerator.device)).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.print(f"step {step}: loss {loss.item():.4f}")

accelerator.wait_for_everyone()
if accelerator.is_main_process:
    accelerator.unwrap_model(model).save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
