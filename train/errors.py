"""The training run's own errors, importable without JAX: `ccq-train` ends them as user errors (one `error:`
line, exit status 2) without importing the loop at start-up."""


class NonFiniteLoss(RuntimeError):
    """A step's loss or gradient norm is not finite and the run's `on_nan` is "stop"."""
