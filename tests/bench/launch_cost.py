"""What an eager-mode engine's host pays to launch one decoder layer: the torch ops the
tiny model's decoder layer dispatches on a one-token decode, counted, times what one small
op's dispatch costs on this host (a one-element add, no compute to speak of). The
emulated executor's default `launch_us` comes from it:

    python -m tests.bench.launch_cost
"""

import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine import EngineConfig, LLMEngine, SchedulerConfig


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def ops_per_layer(steps: int = 4) -> float:
    """Torch ops one decoder layer dispatches per decode step (dense and MoE averaged)."""
    engine = LLMEngine(EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=64), model="tiny",
                                    device="cpu"))
    model = engine.executor.model
    counts, mode = [], _Count()

    def enter(module, args):
        mode.ops = 0
        mode.__enter__()

    def leave(module, args, output):
        mode.__exit__(None, None, None)
        counts.append(mode.ops)

    for layer in model.layers:
        layer.register_forward_pre_hook(enter)
        layer.register_forward_hook(leave)
    engine.add_request(0, prompt_len=8, max_new_tokens=steps + 1)
    engine.run()
    decode = counts[len(model.layers):]  # the first step is the prefill
    return statistics.mean(decode)


def dispatch_us(rounds: int = 20_000) -> list:
    """One small op's cost from Python, in microseconds: a sample per 1,000 calls."""
    a, b = torch.ones(1), torch.ones(1)
    samples = []
    for _ in range(rounds // 1000):
        start = time.perf_counter_ns()
        for _ in range(1000):
            torch.add(a, b)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


if __name__ == "__main__":
    torch.set_num_threads(1)
    ops = ops_per_layer()
    samples = dispatch_us()
    per_op = statistics.median(samples)
    print(f"torch {torch.__version__}: {ops:.0f} ops per decoder layer x {per_op:.2f} us per op "
          f"(median of {len(samples)}, min {min(samples):.2f}) = {ops * per_op:.0f} us per layer")
