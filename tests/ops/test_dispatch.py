"""The backend table: a jitted function that uses impl="pallas" compiles once, in a fresh interpreter.

Importing Pallas registers jax config options that are part of jit's cache key; were the backend
imported on first use (inside the first trace), the second call of that jit would compile again.
"""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp
    import ccq_jax.ops as ops
    from benchmarks.tools.compilation import CompileCounter

    step = jax.jit(lambda q, k, v, g: ops.gla(q, k, v, g, impl="pallas")[0].sum())
    x = jnp.ones((1, 16, 1, 16)) * 0.1
    with CompileCounter() as first:
        step(x, x, x, -x).block_until_ready()
    with CompileCounter() as again:
        step(x, x, x, -x).block_until_ready()
    print(len(first.seconds), len(again.seconds))
""")


def test_a_pallas_jit_compiles_once_in_a_fresh_process():
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    first, again = map(int, out.stdout.split()[-2:])
    assert first >= 1 and again == 0
