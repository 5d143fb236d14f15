"""How a software stack runs a decode step beyond its kernels' times, as kernel tables time
them apart (docs/modeling.md, "Streams and launches"): a second stream for the shared
experts, and programmatic dependent launch overlapping each kernel's prologue with the one
before. Steps with a prefill row run their kernels one after another on every stack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..devices.profile import Figure


@dataclass(frozen=True)
class DecodeStreams:
    # the shared experts on a second stream beside the routed experts' path, under CUDA
    # graphs (the stack's two-stream helper runs them in turn without a graph)
    shared_beside_routed: Optional[str]
    # each decoder layer's kernels' time in a decode-only step over their tables' (PDL)
    layer_scale: Figure


NONE = DecodeStreams(None, Figure(1.0, "assumption", "kernels launched one after another"))

# A table's stack (its `# stack:` line's first word) -> how it runs a decode step
DECODE_STREAMS = {
    "trtllm": DecodeStreams(
        "TensorRT-LLM's DeepseekV3MoE: maybe_execute_in_parallel runs the shared experts on "
        "an auxiliary stream beside the router, dispatch, experts and combine, only while a "
        "CUDA graph is captured (tensorrt_llm/_torch/modules/multi_stream_utils.py)",
        Figure(0.9, "assumption", "aiconfigurator-core 0.12.0's PDL factor for TensorRT-LLM's "
               "large-EP decode layers (DeepSeekModel._PDL_FACTOR; NVIDIA's figure, fitted on "
               "no row here), taken for every TensorRT-LLM decode step: TensorRT-LLM turns PDL "
               "on by default on SM90 and newer (TRTLLM_ENABLE_PDL)")),
}


def decode_streams(stack: str) -> DecodeStreams:
    """How the stack named by a kernel table's `stack` line runs a decode step."""
    return DECODE_STREAMS.get(stack.split()[0] if stack else "", NONE)
