"""Fine-tune an AttnRes model of any family (Kimi Linear, an upcycled Llama, ...) with the transformers Trainer: one
process, or DDP under accelerate launch (no find_unused_parameters needed: every parameter takes part in the graph).

  python examples/finetune_trainer.py MODEL_DIR OUTPUT_DIR
  accelerate launch --multi_gpu --num_processes 2 examples/finetune_trainer.py MODEL_DIR OUTPUT_DIR [--cpu]
"""
import argparse

from datasets import Dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

import hf_attnres  # noqa: F401  registers every family's Auto classes: a folder loads without trust_remote_code

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("model_dir")
parser.add_argument("output_dir")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--cpu", action="store_true", help="force CPU (gloo DDP under accelerate launch)")
parser.add_argument("--gradient-checkpointing", action="store_true")
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(args.model_dir, trust_remote_code=True)
texts = ["the river runs under the stone bridge", "a queen sees the light of the house",
         "the king walks over the dark tree", "light and stone and the river of the house"] * 4
train_set = Dataset.from_dict({"text": texts}).map(lambda row: tokenizer(row["text"]), remove_columns=["text"])

training_args = TrainingArguments(
    output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=2, learning_rate=1e-3,
    logging_steps=1, save_strategy="no", report_to=[], use_cpu=args.cpu, seed=0,
    activation_checkpointing=args.gradient_checkpointing,
    ddp_find_unused_parameters=False,  # Trainer's default is True; not needed: every parameter gets a gradient
)
trainer = Trainer(model=model, args=training_args, train_dataset=train_set,
                  data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))  # pads, labels -100 on padding
trainer.train()
trainer.save_model(args.output_dir)  # the model, its code files and the tokenizer: loads with Auto classes
tokenizer.save_pretrained(args.output_dir)
