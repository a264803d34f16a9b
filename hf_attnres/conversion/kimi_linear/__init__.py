"""Kimi Linear's and Kimi K3's streaming conversion: Moonshot's layout (and K3's wrapper, MXFP4 experts) <-> this
project's HF-native layout, with or without AttnRes, tensor by tensor with bounded memory, and `attnres export` back to
the layouts the serving runtimes read.

The config in both layouts (`config`), the plan from headers alone (`plan`, `reader`, `k3_source`), the streamed run
(`convert`, `writer`), the export (`export`, `runtimes`), K3's published config (`k3_preset`) and tiny local
checkpoints (`fixtures`, `k3_fixtures`). Every other family converts through `hf_attnres.conversion.family_convert`;
the checks, the atomic writer and the error type are the conversion package's own, shared by both paths.
"""
