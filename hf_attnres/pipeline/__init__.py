"""Pipeline parallelism for AttnRes models of every family: DeepSpeed stages, boundary traffic, and the cross-stage
caching model.

Import the modules themselves (`hf_attnres.pipeline.stages`, ...): this package imports nothing, so the pure-Python
parts (`caching`, `layout`, `data`, `weights`) work without DeepSpeed. `stages`, `comms`, `export` and `train` need it
(the `train` extra) and say so in one line when it is missing.
"""
