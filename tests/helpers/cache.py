"""The cache a forward returned, under the installed transformers' field name (`hf_attnres.core.cache_arg`)."""
from hf_attnres.core.cache_arg import CACHE_ARG


def cache_of(outputs):
    return getattr(outputs, CACHE_ARG)
