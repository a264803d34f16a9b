"""Pipeline parallelism for KimiLinearAttnRes: DeepSpeed stages, boundary traffic, and the cross-stage caching model.

`caching` is pure Python (no DeepSpeed); the other modules import DeepSpeed (the `train` extra).
"""
from .caching import CachingReport, simulate_interleaved
from .comms import BoundaryTraffic, P2PTraffic, boundary_report, format_report, report_rows
from .export import save_pipeline_checkpoint
from .layout import single_source_mix_params
from .stages import (CausalLMLoss, DecoderLayerPipe, EmbeddingPipe, OutputHeadPipe, build_pipeline,
                     local_model_state_dict, pipeline_layer_specs)
from .weights import StateDictWeights

__all__ = [
    "CachingReport",
    "simulate_interleaved",
    "BoundaryTraffic",
    "P2PTraffic",
    "boundary_report",
    "format_report",
    "report_rows",
    "save_pipeline_checkpoint",
    "single_source_mix_params",
    "CausalLMLoss",
    "DecoderLayerPipe",
    "EmbeddingPipe",
    "OutputHeadPipe",
    "build_pipeline",
    "local_model_state_dict",
    "pipeline_layer_specs",
    "StateDictWeights",
]
