"""The host's cost of one step, a figure of the software stack rather than the chip: with
kernel tables it replaces the profile's `step_overhead_us` (docs/modeling.md, "The host's
cost a step")."""

from __future__ import annotations

from ..devices.profile import Figure

# cuda_graphs -> the host's exposed time a step
STEP_HOST_US = {
    True: Figure(50, "assumption", "a decode step replayed as one CUDA graph, its scheduling "
                 "overlapped with the previous step on the device (TensorRT-LLM's overlap "
                 "scheduler, SGLang's zero-overhead scheduler): the graph's launch and one "
                 "synchronisation; not measured"),
    False: Figure(3500, "press", "RTP-LLM, 'DeepSeek Replay Tech Report' (rtp-llm.ai, "
                  "references/deepseek/reporter): about 1.5 ms of host time and 2 ms of "
                  "kernel launches a decode step without CUDA graphs"),
}
