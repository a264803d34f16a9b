"""The decoder families with AttnRes, each a thin transformers-style folder over `hf_attnres.core`: a configuration file
(the family's config plus the AttnRes fields) and a modeling file (the family's decoder layer and model, except the
residual). `registry` says which of transformers' families are supported, and why the others are refused."""
