"""Supervised fine-tuning of an AttnRes model of any family with TRL's SFTTrainer on chat data, loss on the assistant
tokens only (the chat template that prepare_data.py / train.py save with the tokenizer marks them).

  python examples/finetune_trl_sft.py MODEL_DIR OUTPUT_DIR
"""
import argparse

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

import hf_attnres  # noqa: F401  registers every family's Auto classes: a folder loads without trust_remote_code
from hf_attnres.training.chat import ensure_chat_template

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("model_dir")
parser.add_argument("output_dir")
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model_dir, trust_remote_code=True)
tokenizer = ensure_chat_template(tokenizer)  # the tokenizer's template, or attnres' default when it has none
model = AutoModelForCausalLM.from_pretrained(args.model_dir, trust_remote_code=True)
conversations = [
    [{"role": "user", "content": "where does the river run"},
     {"role": "assistant", "content": "under the stone bridge"}],
    [{"role": "user", "content": "what does the queen see"},
     {"role": "assistant", "content": "the light of the house"}],
] * 4
train_set = Dataset.from_dict({"messages": conversations})

config = SFTConfig(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=2, learning_rate=1e-3,
                   logging_steps=1, save_strategy="no", report_to=[], max_length=64, assistant_only_loss=True,
                   bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported())  # TRL defaults to bf16
trainer = SFTTrainer(model=model, args=config, train_dataset=train_set, processing_class=tokenizer)
trainer.train()
trainer.save_model(args.output_dir)
