"""Wall-clock timing of a benchmark's calls: the best of several runs after one warm-up, until the device is done."""

import time

import jax


def best_times(fn, repeats: int, wait=jax.block_until_ready) -> tuple[float, float]:
    """(best time until the device has finished, best time until fn() returned) over `repeats` timed runs of fn
    after one untimed (compiling) run; `wait(result)` returns once the device has finished the run (JAX by default;
    `lambda _: torch.cuda.synchronize()` for PyTorch). The second is the host's share of a call whose device work
    is dispatched asynchronously."""
    wait(fn())
    done = returned = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        returned = min(returned, time.perf_counter() - start)
        wait(result)
        done = min(done, time.perf_counter() - start)
    return done, returned


def best_seconds(fn, repeats: int, wait=jax.block_until_ready) -> float:
    """The first of `best_times`: the best time until the device has finished."""
    return best_times(fn, repeats, wait)[0]
