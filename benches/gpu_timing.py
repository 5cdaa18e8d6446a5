"""How the PyTorch-only benches time a step on a GPU: the median of CUDA events around repeats,
after warm-up. On a CPU a step runs once, untimed (0.0): the benches only prove there that they
run."""

import statistics

import torch


def timed(fn, reps=10, warmup=3):
    """Milliseconds `fn` takes on the GPU, the median of `reps` runs after `warmup`."""
    if not torch.cuda.is_available():
        fn()
        return 0.0
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
