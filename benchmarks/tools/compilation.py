"""Counting XLA compilations: `with CompileCounter() as c: ...` then `c.seconds`, one duration per backend compile
(jax.monitoring's compile event), and `c.names`, the compiled functions' names (e.g. "jit(step)"). The benchmarks
report compile time with it; tests check that a jit compiles once.
"""

import jax


class CompileCounter:
    """Collects the seconds of every XLA backend compilation while open (jax.monitoring's compile event)."""

    def __enter__(self):
        self.seconds, self.names = [], []
        jax.monitoring.register_event_duration_secs_listener(self._record)
        return self

    def _record(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.seconds.append(duration)
            self.names.append(kwargs.get("fun_name"))

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._record)
