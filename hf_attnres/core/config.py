"""The AttnRes fields of a config and their checks, for any PreNorm decoder family.

A family's AttnRes config is the family's own config plus these fields:
`class <Family>AttnResConfig(AttnResConfigMixin, <Family>Config)`. The mixin adds the fields (declared once, in
`ATTN_RES_FIELDS`) to the subclass before transformers turns it into a dataclass, validates them at construction (one
ValueError naming the field, before anything compares or allocates) and resolves `attn_res_mode`. The installed
package also checks the family's own sizes, signs, finite values, activation and dtype name there (`field_checks`).
"""
import functools
import math

from hf_attnres.core.version_guard import REPAIR_COMMAND

ATTN_RES_MODES = ("standard", "block", "full")
ATTN_RES_BACKENDS = ("auto", "torch", "triton", "cpp")
ATTN_RES_SCORES = ("softmax", "sigmoid")
# The config properties naming the features whose code a saved folder's copy was generated without (it ships a
# feature's code only where its config uses it): a config asking for one is refused, the code would not compute it
ATTN_RES_GENERATED_WITHOUT = ()

# name: (annotation, default), documented in the package's docs. Annotations are strings (as under
# `from __future__ import annotations`): `@strict` then leaves their types to `check_attn_res_types`, which names the
# field in a ValueError (strict's own error is not one)
ATTN_RES_FIELDS = {
    "attn_res_mode": ("str | None", None),
    "attn_res_block_size": ("int", 0),
    "attn_res_backend": ("str", "auto"),
    "attn_res_two_phase": ("bool | None", None),
    "attn_res_fuse_norm": ("bool", True),
    "attn_res_recompute": ("bool", False),
    "attn_res_static_mixing": ("bool", False),
    "attn_res_score": ("str", "softmax"),
    "attn_res_key_norm": ("bool", True),
    "attn_res_query_init_std": ("float", 0.0),
    "attn_res_key_norm_init": ("float", 1.0),
    "attn_res_gated_read": ("bool", False),
}
_SWITCHES = {"attn_res_two_phase": True, "attn_res_fuse_norm": False, "attn_res_recompute": False,
             "attn_res_static_mixing": False, "attn_res_key_norm": False,
             "attn_res_gated_read": False}  # name: may be None


class AttnResConfigChecks:
    """The family-independent checks and derived values of the AttnRes fields."""

    # the checks of a config-switched feature's fields, by the property switching it on, each registered by the
    # feature's code at its import
    feature_checks = {}

    def check_attn_res_layout(self):
        if self.attn_res_mode not in ATTN_RES_MODES:
            raise ValueError(f"attn_res_mode must be one of {ATTN_RES_MODES}, got {self.attn_res_mode!r}")
        if self.attn_res_mode == "block" and self.attn_res_block_size < 1:
            raise ValueError(
                "attn_res_block_size must be >= 1 in block mode (decoder layers per block), "
                f"got {self.attn_res_block_size}"
            )
        if self.attn_res_block_size < 0:
            raise ValueError(f"attn_res_block_size must be >= 0, got {self.attn_res_block_size}")
        if self.attn_res_backend not in ATTN_RES_BACKENDS:
            raise ValueError(f"attn_res_backend must be one of {ATTN_RES_BACKENDS}, got {self.attn_res_backend!r}")
        if self.attn_res_score not in ATTN_RES_SCORES:
            raise ValueError(f"attn_res_score must be one of {ATTN_RES_SCORES}, got {self.attn_res_score!r}")
        for check in self.feature_checks.values():
            check(self)
        for feature in ATTN_RES_GENERATED_WITHOUT:
            if getattr(self, feature):
                raise ValueError(f"{feature} is set (config.json), but this folder's code was generated for a config "
                                 f"without it: regenerate the code with `{REPAIR_COMMAND}`")

    @property
    def attn_res_ablation(self) -> bool:
        """Whether a paper ablation changes the mix (then it runs on the PyTorch reference, not the fused kernels)."""
        return self.attn_res_static_mixing or self.attn_res_score != "softmax" or not self.attn_res_key_norm

    @property
    def attn_res_num_blocks(self) -> int:
        """Number of depth blocks: N in the paper (the embedding is one more source); `DepthLayout.num_blocks`."""
        from hf_attnres.core.depth_layout import DepthLayout

        return DepthLayout.of(self).num_blocks

    # `backend_override(field)`: the installed package's switch over the backend, set at its import; None in a
    # folder's copy, where the config field decides
    backend_override = None

    def resolved_backend(self) -> str:
        """The backend in force: the config field, unless the installed package overrides it."""
        override = type(self).backend_override
        return self.attn_res_backend if override is None else override(self.attn_res_backend)


class AttnResConfigMixin(AttnResConfigChecks):
    """The AttnRes fields added to a family's config class (first base, before the family's config), and the checks
    of its fields at construction. `extra_activations`: `hidden_act` values beyond transformers' `ACT2FN`;
    `attn_res_refused_flags`: the family's config fields that AttnRes refuses set (truthy), each with the reason."""

    attn_res_family = None  # the family's own model_type (e.g. "llama"): what an upcycled checkpoint came from
    attn_res_refused_flags = {}  # read only: a class attribute, not a config field
    extra_activations = ()
    # The installed package's, set at its import (None in a folder's copy, which checks the AttnRes fields only):
    # `field_checks(config)` checks the family's own fields, `init_kwargs_checks(kwargs)` the constructor arguments
    # transformers reads without checking (`torch_dtype`)
    field_checks = init_kwargs_checks = None

    def __init_subclass__(cls, **kwargs):
        # declared on the subclass itself, before transformers' PreTrainedConfig.__init_subclass__ makes it a
        # dataclass: a plain mixin's annotations are not dataclass fields. The AttnRes fields come first.
        own = cls.__dict__.get("__annotations__", {})
        added = {name: annotation for name, (annotation, _) in ATTN_RES_FIELDS.items() if name not in own}
        cls.__annotations__ = added | own
        for name in added:
            setattr(cls, name, ATTN_RES_FIELDS[name][1])
        super().__init_subclass__(**kwargs)
        cls.__init__ = _field_errors_as_value_errors(cls.__init__)


    def __post_init__(self, **kwargs):
        check_attn_res_types(self)
        self.check_field_types()
        self.check_init_kwargs(kwargs)
        super().__post_init__(**kwargs)
        if self.attn_res_mode is None:
            self.attn_res_mode = "block" if self.attn_res_block_size > 0 else "standard"
        self.check_attn_res()
        self.check_refused_flags()

    def check_refused_flags(self) -> None:
        """A ValueError naming the first of the family's refused fields that is set, and why it is refused."""
        for field, reason in self.attn_res_refused_flags.items():
            value = getattr(self, field, None)
            if value:
                raise ValueError(f"{field}={value!r} is not supported with AttnRes: {reason}")

    def check_field_types(self) -> None:
        """The family's own fields, checked first (2.5, True or "4" as a layer count, NaN as an epsilon, a misspelt
        activation): a ValueError naming the field, where the installed package is (`field_checks`)."""
        if self.field_checks is not None:
            self.field_checks(self)

    def check_init_kwargs(self, kwargs: dict) -> None:
        """The constructor arguments transformers reads without checking, where the installed package is."""
        if self.init_kwargs_checks is not None:
            self.init_kwargs_checks(kwargs)

    def check_attn_res(self) -> None:
        """The AttnRes layout (mode, block size, backend, ablations), once the family's config is built."""
        self.check_attn_res_layout()

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if not config_dict:  # transformers would build the family's default (billions of parameters) from nothing
            raise OSError(f"{pretrained_model_name_or_path}: no config.json there, so the model's size and AttnRes "
                          "layout are unknown (a saved model folder holds config.json beside its weights)")
        return config_dict, kwargs


def _field_errors_as_value_errors(init):
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


__all__ = ["AttnResConfigMixin", "AttnResConfigChecks", "ATTN_RES_FIELDS", "ATTN_RES_GENERATED_WITHOUT",
           "ATTN_RES_MODES", "ATTN_RES_BACKENDS", "ATTN_RES_SCORES", "check_attn_res_types"]
