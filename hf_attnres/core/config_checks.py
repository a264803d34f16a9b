"""The checks of a family config's own fields (sizes, signs, finite values, activation, dtype name) at construction:
one ValueError naming the field, before anything compares or allocates (2.5, True or "4" as a layer count, NaN as an
epsilon, a misspelt activation). The installed package hands them to the config classes
(`AttnResConfigMixin.field_checks`, hf_attnres.core.installed); a saved folder's code checks its AttnRes fields only.
"""
import math

# The size fields of every decoder family's config: name -> smallest valid value (None allowed where optional)
BASE_COUNTS = dict(num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, hidden_size=1,
                   intermediate_size=1, vocab_size=1, max_position_embeddings=1, head_dim=1)
OPTIONAL_BASE_COUNTS = ("num_key_value_heads", "head_dim")
# Float fields: name -> (smallest valid value, whether the smallest itself is allowed, optional)
BASE_FLOATS = dict(rms_norm_eps=(0.0, False, False), initializer_range=(0.0, True, True),
                   attention_dropout=(0.0, True, True))
# The dtypes a model computes in; float8 and the like are storage formats of quantized checkpoints
DTYPES = ("float32", "float16", "bfloat16", "auto")

def check_counts(config, fields: dict, optional=()) -> None:
    """Each integer field of `fields` (name -> smallest valid value) an int >= its minimum (None where optional)."""
    for field, minimum in fields.items():
        if not hasattr(config, field):  # a field this family's config does not have
            continue
        value = getattr(config, field)
        if value is None and field in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{field} must be an integer, got {value!r} ({type(value).__name__})")
        if value < minimum:
            raise ValueError(f"{field} must be >= {minimum}, got {value}")


def check_floats(config, fields: dict) -> None:
    """Each float field (name -> (minimum, minimum allowed, optional)) a finite number in range; dropout < 1."""
    for field, (minimum, inclusive, optional) in fields.items():
        if not hasattr(config, field):
            continue
        value = getattr(config, field)
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{field} must be a number, got {value!r} ({type(value).__name__})")
        if not math.isfinite(value):
            raise ValueError(f"{field} must be finite, got {value}")
        if value < minimum or (value == minimum and not inclusive):
            raise ValueError(f"{field} must be {'>=' if inclusive else '>'} {minimum}, got {value}")
    if (getattr(config, "attention_dropout", None) or 0) >= 1:
        raise ValueError(f"attention_dropout must be < 1, got {config.attention_dropout}")


def check_activation(value, extra=(), field: str = "hidden_act") -> None:
    """`hidden_act` (or `field`): a name transformers' `ACT2FN` knows (or one the family adds), not a typo found only
    at the first forward."""
    if value is None:
        return
    from transformers.activations import ACT2FN

    if not isinstance(value, str) or (value not in ACT2FN and value not in extra):
        known = sorted([*ACT2FN, *extra])
        raise ValueError(f"{field} must be one of {known}, got {value!r}")


def check_dtype(value, field: str = "dtype") -> None:
    """`dtype` / `torch_dtype`: a name (or torch dtype) of a floating type this model computes in."""
    if value is None:
        return
    name = str(value).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"{field} must be one of {DTYPES} (or unset), got {value!r}"
                         + ("; float8 is a storage format of quantized checkpoints, not one this model computes in"
                            if "float8" in name else ""))


def check_family_fields(config) -> None:
    """The shared size and float fields, the activation (`hidden_act`, or Gemma's `hidden_activation`; beyond
    transformers' `ACT2FN`, the family's `extra_activations`) and the dtype name."""
    check_counts(config, BASE_COUNTS, OPTIONAL_BASE_COUNTS)
    check_floats(config, BASE_FLOATS)
    for field in ("hidden_act", "hidden_activation"):
        check_activation(getattr(config, field, None), getattr(config, "extra_activations", ()), field)
    check_dtype(getattr(config, "dtype", None))


def check_init_kwargs(kwargs: dict) -> None:
    """`torch_dtype`, the old name of `dtype`, which transformers reads without checking."""
    check_dtype(kwargs.get("torch_dtype"), "torch_dtype")


__all__ = ["BASE_COUNTS", "OPTIONAL_BASE_COUNTS", "BASE_FLOATS", "DTYPES", "check_counts", "check_floats",
           "check_activation", "check_dtype", "check_family_fields", "check_init_kwargs"]
