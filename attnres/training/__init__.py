"""Training tools: data preparation, the training loop behind `scripts/train.py`, checkpoints and diagnostics.

Small modules with one job each; `scripts/prepare_data.py` and `scripts/train.py` are thin command lines over them.
Needs the `train` extra (`pip install -e ".[train]"`): datasets, tokenizers, deepspeed, tensorboard, matplotlib.
"""
