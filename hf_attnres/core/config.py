"""The AttnRes fields of a config and their checks, for any PreNorm decoder family.

A family's AttnRes config is the family's own config plus these fields:
`class <Family>AttnResConfig(AttnResConfigMixin, <Family>Config)`. The mixin adds the fields (declared once, in
`ATTN_RES_FIELDS`) to the subclass before transformers turns it into a dataclass, checks their layout at
construction and resolves `attn_res_mode`. The installed package also checks the fields' types and the family's own
sizes, signs, finite values, activation and dtype name there (`field_checks`, hf_attnres.core.config_checks).
"""
from hf_attnres.core.version_guard import REPAIR_COMMAND

ATTN_RES_MODES = ("standard", "block", "full")
ATTN_RES_BACKENDS = ("auto", "torch", "triton", "cpp")
ATTN_RES_SCORES = ("softmax", "sigmoid")
# The config properties naming the features whose code a saved folder's copy was generated without (it ships a
# feature's code only where its config uses it): a config asking for one is refused, the code would not compute it
ATTN_RES_GENERATED_WITHOUT = ()

# name: (annotation, default), documented in the package's docs. Annotations are strings (as under
# `from __future__ import annotations`): `@strict` then leaves their types to the installed package's checks
# (`field_checks`), which name the field in a ValueError (strict's own error is not one)
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


class AttnResConfigChecks:
    """The family-independent checks and derived values of the AttnRes fields."""

    # the checks of a config-switched feature's fields, by the property switching it on, each registered by the
    # feature's code at its import
    feature_checks = {}

    def check_attn_res_layout(self):
        if self.attn_res_mode not in ATTN_RES_MODES:
            raise ValueError(f"attn_res_mode must be one of {ATTN_RES_MODES}, got {self.attn_res_mode!r}")
        size = self.attn_res_block_size  # a fraction would place the block boundaries silently wrong
        if self.attn_res_mode == "block" and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"attn_res_block_size must be >= 1 in block mode (a whole number of decoder layers per "
                             f"block), got {size!r}")
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
    # The installed package's, set at its import (None in a folder's copy, which checks the AttnRes layout only):
    # `field_checks(config, kwargs)` checks the fields' types, the family's own fields and the constructor arguments
    # transformers reads without checking (`torch_dtype`); `init_wrapper(init)` re-raises `@strict`'s type errors as
    # ValueErrors naming the field
    field_checks = init_wrapper = None

    def __init_subclass__(cls, **kwargs):
        # declared on the subclass itself, before transformers' PreTrainedConfig.__init_subclass__ makes it a
        # dataclass: a plain mixin's annotations are not dataclass fields. The AttnRes fields come first.
        own = cls.__dict__.get("__annotations__", {})
        added = {name: annotation for name, (annotation, _) in ATTN_RES_FIELDS.items() if name not in own}
        cls.__annotations__ = added | own
        for name in added:
            setattr(cls, name, ATTN_RES_FIELDS[name][1])
        super().__init_subclass__(**kwargs)
        if cls.init_wrapper is not None:
            cls.__init__ = cls.init_wrapper(cls.__init__)

    def __post_init__(self, **kwargs):
        self.check_field_types(kwargs)
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

    def check_field_types(self, kwargs: dict) -> None:
        """The fields and constructor arguments, checked first, where the installed package is (`field_checks`)."""
        if self.field_checks is not None:
            self.field_checks(self, kwargs)

    def check_attn_res(self) -> None:
        """The AttnRes layout (mode, block size, backend, ablations), once the family's config is built."""
        self.check_attn_res_layout()


__all__ = ["AttnResConfigMixin", "AttnResConfigChecks", "ATTN_RES_FIELDS", "ATTN_RES_GENERATED_WITHOUT",
           "ATTN_RES_MODES", "ATTN_RES_BACKENDS", "ATTN_RES_SCORES"]
