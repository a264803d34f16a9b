"""The gated read (`hf_attnres.core.gated_read`, config field `attn_res_gated_read`) hooked onto the mix points and
the weights' initialization when this module is imported: the package imports it, and a saved folder's code holds it
(with the gated read) only when the folder's config reads through the gate (the folder's config refuses, in one line,
a gated read its code was not generated with). With the field False nothing here runs.
"""
from hf_attnres.core.gated_read import DepthGate, add_gate, gated_read
from hf_attnres.core.mix_point import AttnResMixing
from hf_attnres.core.model import AttnResPreTrainedMixin

AttnResMixing.gate_point = staticmethod(add_gate)
AttnResMixing.gated_mix = staticmethod(gated_read)
AttnResPreTrainedMixin.zero_init = (*AttnResPreTrainedMixin.zero_init, DepthGate)

__all__ = []
