"""The name transformers gives the cache in its model API, for the installed version.

transformers 5.24 renamed the cache argument of every forward, mask builder and generation step, and the output field
that carries it back to `generate`, from `past_key_values` to `cache` (the old argument name is accepted with a
FutureWarning until 5.40; the output field has only the new name). A model that takes only one of the names gets an
empty cache at every decoding step under the other versions, and generates wrong tokens without an error. So the
models here take the cache under either name, and pass it on and return it under the installed version's name.
"""
from transformers.modeling_outputs import BaseModelOutputWithPast

# transformers 5.24 renamed the cache argument, and the output field `generate` reads back between steps, from
# `past_key_values` to `cache`: a model taking one name only gets an empty cache at every decoding step under the
# other versions, and wrong tokens without an error. So the models take either name and pass on the installed one's.
# Read from the output class rather than the version string: the field is what `generate` reads back
CACHE_ARG = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


def given_cache(cache, past_key_values):
    """The cache a caller passed under either name; both at once must be the same object."""
    if past_key_values is None:
        return cache
    if cache is not None and cache is not past_key_values:
        raise ValueError("got two caches: `cache` and `past_key_values` are one argument (its name before "
                         "transformers 5.24); pass one of them")
    return past_key_values


def takes_old_cache_name(forward):
    """A model forward that takes the cache as `cache`, and `past_key_values` too: where `cache` is the installed
    transformers' name, the old one is renamed with transformers' own deprecation warning, as its models do; before,
    `past_key_values` is the current name (`generate` passes it every step) and is taken as it is, silently."""
    if CACHE_ARG != "cache":
        return forward
    from transformers.utils.deprecation import deprecate_kwarg

    return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)


def cache_kwargs(cache) -> dict:
    """`{name: cache}` under the installed transformers' name, for its modules, mask builders and outputs."""
    return {CACHE_ARG: cache}


__all__ = ["CACHE_ARG", "given_cache", "cache_kwargs", "takes_old_cache_name"]
