"""attnres: Attention Residuals (Kimi Team, 2026) for Hugging Face Transformers' PreNorm decoders.

`import hf_attnres` registers the configs and models of every family with the Auto classes (`<family>_attnres`; the
families are the folders of `hf_attnres.families`, listed by `hf_attnres.families.registry.SUPPORTED`), each marked for
`save_pretrained` to write `auto_map` plus the generated code files (hf_attnres.folders.remote_code, wired in below),
so a
saved folder also loads with `trust_remote_code=True` without this package. `hf_attnres.upcycle(model)` turns a loaded
standard model of any of them into Block or Full AttnRes; `hf_attnres.save(model, folder)` / `hf_attnres.load(folder)`
add
the tools' folder checks and weights record (hf_attnres.folders.model_folder). Every family's public classes are
reachable here alike (`hf_attnres.LlamaAttnResForCausalLM`, `hf_attnres.KimiLinearAttnResConfig`, ...; the same as
`hf_attnres.families.<family>`). `import hf_attnres` loads the model only: the tools' modules load when first called.
"""
from .core.installed import install as _install_package_features
from .core.model import AttnResPreTrainedMixin
from .families.registry import family_exports, register_auto_classes
from .families.upcycle import upcycle
from .kernels import attn_res, attn_res_naive
from .kernels.mix import cpu_fused, register_cpu_kernel

__version__ = "0.1.0"

register_auto_classes()


def _write_code_files(folder, model_module: str) -> list:
    from .folders.remote_code import write_code_files

    return write_code_files(folder, model_module)


# the package's classes write their folder's generated code on `save_pretrained`; a folder's own copy has no writer
AttnResPreTrainedMixin.code_writer = staticmethod(_write_code_files)
# backends "auto" and "cpp" on CPU run the package's fused C++ kernel (built on first use); a folder's own copy of the
# kernels registers none and takes the lean path, so it ships no compiler, build cache or file lock
register_cpu_kernel(cpu_fused.fits, cpu_fused.attn_res_cpu)
# the fused depth mix mapped with `kernels`, and the tool-side checks and switches (hf_attnres.core.installed)
_install_package_features()


def save(model, folder, *args, **kwargs) -> None:
    """`model.save_pretrained(folder, ...)` through a temporary folder, with the weights record
    (`hf_attnres.folders.model_folder.save`)."""
    from .folders.model_folder import save

    save(model, folder, *args, **kwargs)


def load(folder, *args, **kwargs):
    """`from_pretrained` with the folder checked first and the weights record after
    (`hf_attnres.folders.model_folder.load`; `model_class=` picks the class, default `AutoModelForCausalLM`)."""
    from .folders.model_folder import load

    return load(folder, *args, **kwargs)

# every family's public classes (its package's `__all__`: `LlamaAttnResForCausalLM`, `KimiLinearAttnResConfig`, ...),
# each reachable here alike; `register_auto_classes` above has imported them all, so a lookup costs a dict read
_FAMILY_EXPORTS = family_exports()


def __getattr__(name: str):
    try:
        return _FAMILY_EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    return sorted({*globals(), *_FAMILY_EXPORTS})


__all__ = ["upcycle", "save", "load", "attn_res", "attn_res_naive", *_FAMILY_EXPORTS]
