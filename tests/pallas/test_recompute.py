"""The backward passes recompute from their residuals (`_recompute_from`): in the compiled fwd+bwd program
of the gated delta rule, the backward runs its own `wy_apply` (w alone) and forms the states entering the
chunks again (`chunk_states`, from the kept v_new) while the forward runs `delta_states`.

Without the optimization barrier, XLA would merge what the backward recomputes with the forward's identical
work and keep the forward's results alive until the backward instead. Interpret mode on the CPU: each kernel is a loop
whose op name says which kernel and which pass ("transpose(...)": the backward) it belongs to.
"""

import collections
import re

import jax
import jax.numpy as jnp

import ccq_jax.ops as ops


def test_the_gated_delta_rule_backward_recomputes_w_and_the_states():
    spec = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    b, t, h, d = 1, 64, 1, 16

    def fwd_bwd(q, k, v, g, beta, do):
        op = lambda q, k, v, g, beta: ops.gated_delta_rule(q, k, v, g, beta, impl="pallas", chunk_size=16)[0]
        o, vjp = jax.vjp(op, q, k, v, g, beta)
        return o, vjp(do)

    args = [spec(b, t, h, d)] * 3 + [spec(b, t, h)] * 2 + [spec(b, t, h, d)]
    text = jax.jit(fwd_bwd).trace(*args).lower().compile().as_text()
    runs = collections.Counter()
    for name in re.findall(r' while\(.*op_name="([^"]*)"', text):
        kernel = re.search(r"/(\w+)/while", name).group(1)
        runs[kernel, "backward" if "transpose(" in name else "forward"] += 1
    assert runs["wy_apply", "forward"] >= 1 and runs["wy_apply", "backward"] >= 1, runs
    assert runs["delta_states", "forward"] >= 1 and runs["chunk_states", "backward"] >= 1, runs
