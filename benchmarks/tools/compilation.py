"""Counting XLA compilations: `with CompileCounter() as c: ...` then `c.seconds`, one duration per backend compile
(jax.monitoring's compile event). The benchmarks report compile time with it; tests check that a jit compiles once.
"""

import jax


class CompileCounter:
    """Collects the seconds of every XLA backend compilation while open (jax.monitoring's compile event)."""

    def __enter__(self):
        self.seconds = []
        jax.monitoring.register_event_duration_secs_listener(self._record)
        return self

    def _record(self, event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            self.seconds.append(duration)

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._record)
