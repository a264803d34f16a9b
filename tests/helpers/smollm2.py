"""The real SmolLM2-135M-Instruct, offline (cached once under ~/.cache/attnres/smollm2-135m-instruct): the loader lives
in hf_attnres.study.continued.source, which the continued-training study uses too."""
from hf_attnres.study.continued.source import GGUF_NAME, cache_dir, dequantized, gguf_file, load_smollm2

__all__ = ["GGUF_NAME", "cache_dir", "dequantized", "gguf_file", "load_smollm2"]
