"""Big-model inference (`device_map="auto"` with CPU / disk offload): accelerate's hooks load an offloaded module's
weights when that module's *forward* runs. The AttnRes mix reads its norm gain, pseudo-query and the following
RMSNorm's gain directly (fused arithmetic, not their forwards), so it loads them with accelerate's own
`align_module_device` around the read. Without offload hooks this is a no-op (one attribute check per module)."""
from __future__ import annotations

import contextlib

from transformers.utils.import_utils import is_accelerate_available

_NOTHING = contextlib.nullcontext()


def onloaded(*modules):
    """A context in which the offloaded tensors of `modules` (None entries skipped) are on their execution device.
    accelerate's offload hooks load a module's weights when its *forward* runs; the mix reads its norm gain,
    pseudo-query and the following RMSNorm's gain directly, so it loads them with `align_module_device` around the
    read. Without offload hooks this is a no-op."""
    # accelerate stores the hook as a plain attribute (in __dict__); reading it there skips nn.Module.__getattr__'s
    # failing lookup, ~5 us a module, paid three times at every mix point of every decode step
    hooked = [m for m in modules if m is not None and m.__dict__.get("_hf_hook") is not None]
    return _onloaded(hooked) if hooked else _NOTHING


@contextlib.contextmanager
def _onloaded(modules):
    # offload hooks mean accelerate is installed; the `if` tells transformers' remote-code loader that the model
    # does not need accelerate otherwise
    if is_accelerate_available():
        from accelerate.utils import align_module_device

    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(align_module_device(module))
        yield
