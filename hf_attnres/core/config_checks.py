"""The checks of a config's field types and of a family config's own fields (sizes, signs, finite values,
activation, dtype name) at construction: one ValueError naming the field, before anything compares or allocates (2.5,
True or "4" as a layer count, a truthy "no" as a switch, NaN as an epsilon, a misspelt activation), and the refusal of
a folder without config.json. The installed package hands them to the config classes (`AttnResConfigMixin`'s hooks,
hf_attnres.core.installed); a saved folder's code checks the AttnRes layout only and takes a config as transformers
does.
"""
import functools
import math

from .config import AttnResConfigMixin

# The size fields of every decoder family's config: name -> smallest valid value (None allowed where optional)
BASE_COUNTS = dict(num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1, hidden_size=1,
                   intermediate_size=1, vocab_size=1, max_position_embeddings=1, head_dim=1)
OPTIONAL_BASE_COUNTS = ("num_key_value_heads", "head_dim")
# Float fields: name -> (smallest valid value, whether the smallest itself is allowed, optional)
BASE_FLOATS = dict(rms_norm_eps=(0.0, False, False), initializer_range=(0.0, True, True),
                   attention_dropout=(0.0, True, True))
# The dtypes a model computes in; float8 and the like are storage formats of quantized checkpoints
DTYPES = ("float32", "float16", "bfloat16", "auto")
# The AttnRes switches: name -> whether None is allowed
_SWITCHES = {"attn_res_two_phase": True, "attn_res_fuse_norm": False, "attn_res_recompute": False,
             "attn_res_static_mixing": False, "attn_res_key_norm": False,
             "attn_res_gated_read": False}  # name: may be None


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


def field_errors_as_value_errors(init):
    """The dataclass `__init__`, with `@strict`'s type error on a field ("4" or 2.5 as a layer count, NaN as a
    vocabulary size), which is no ValueError, raised as one line naming the field."""
    from huggingface_hub.errors import StrictDataclassFieldValidationError

    if getattr(init, "_attn_res_wrapped", False):
        return init

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except StrictDataclassFieldValidationError as error:
            field = getattr(error, "field", None) or str(error).split("'")[1]
            value = kwargs.get(field, "?")
            raise ValueError(f"{field} must be of the type its config declares ({_declared(type(self), field)}), "
                             f"got {value!r} ({type(value).__name__})") from None

    __init__._attn_res_wrapped = True
    return __init__


def _declared(cls, field: str) -> str:
    annotation = cls.__dataclass_fields__[field].type if field in getattr(cls, "__dataclass_fields__", {}) else "?"
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def check_attn_res_types(config) -> None:
    """ValueError naming the field for a wrong type, sign or non-finite value of an AttnRes field (2.5 or "2" as a
    block size, a truthy "no" as a switch, NaN as an init scale), before anything compares or allocates."""
    size = config.attn_res_block_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"attn_res_block_size must be an integer >= 0, got {size!r}")
    for field, optional in _SWITCHES.items():
        value = getattr(config, field)
        if not isinstance(value, bool) and not (optional and value is None):
            raise ValueError(f"{field} must be {'True, False or None' if optional else 'True or False'}, "
                             f"got {value!r} ({type(value).__name__})")
    for field, strictly in (("attn_res_query_init_std", False), ("attn_res_key_norm_init", True)):
        value = getattr(config, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (strictly and value == 0):
            raise ValueError(f"{field} must be a finite number {'> 0' if strictly else '>= 0'}, got {value!r}")
    for field in ("attn_res_mode", "attn_res_backend", "attn_res_score"):
        value = getattr(config, field)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{field} must be a string, got {value!r} ({type(value).__name__})")


def config_dict_or_refusal(cls, pretrained_model_name_or_path, **kwargs):
    """transformers' `get_config_dict` (the config classes' classmethod), refusing a folder without config.json."""
    config_dict, kwargs = super(AttnResConfigMixin, cls).get_config_dict(pretrained_model_name_or_path, **kwargs)
    if not config_dict:  # transformers would build the family's default (billions of parameters) from nothing
        raise OSError(f"{pretrained_model_name_or_path}: no config.json there, so the model's size and AttnRes "
                      "layout are unknown (a saved model folder holds config.json beside its weights)")
    return config_dict, kwargs


def check_config_fields(config, kwargs: dict) -> None:
    """The AttnRes fields' types, then the family's own fields and the constructor arguments."""
    check_attn_res_types(config)
    check_family_fields(config)
    check_init_kwargs(kwargs)


__all__ = ["BASE_COUNTS", "OPTIONAL_BASE_COUNTS", "BASE_FLOATS", "DTYPES", "check_counts", "check_floats",
           "check_activation", "check_dtype", "check_family_fields", "check_init_kwargs", "check_attn_res_types",
           "check_config_fields", "config_dict_or_refusal", "field_errors_as_value_errors"]
