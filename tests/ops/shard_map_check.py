"""Every op of the given impls inside `jax.shard_map` (default checks) over a batch-sharded mesh of all devices (1,
2 or 4), against the same op unsharded: outputs and the gradients of every input; also with an initial state every
shard shares (its gradient is the sum over shards). Run in a process of its own by tests/ops/test_shard_map.py
(4 CPU devices, recurrent and chunk) and tests/pallas/test_gpu.py (pallas)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import ccq_jax.ops as ops
from tests.builders import rel_rms as _rel


def main(impls):
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    b, t, h, dk, dv = 4, 40, 2, 16, 32
    r = np.random.default_rng(0)
    x = lambda *s: jnp.asarray(r.standard_normal(s), jnp.float32)
    q, k, v = x(b, t, h, dk), x(b, t, h, dk), x(b, t, h, dv)
    unit = lambda a: a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    g = jax.nn.log_sigmoid(x(b, t, h, dk) + 3.0)
    gh, beta, lam = g[..., 0], jax.nn.sigmoid(x(b, t, h)), jax.nn.sigmoid(x(b, t, h) - 2.0)
    segments = jnp.asarray(np.repeat([[0] * 25 + [1] * 15], b, 0), jnp.int32)
    h0 = x(1, h, dk, dv)[0] * 0.1  # one state for every row, shared by the shards
    ops_by_name = {
        "gla": lambda q, k, v, g, gh, beta, lam, s, impl: ops.gla(q, k, v, g, segment_ids=s, impl=impl)[0],
        "gated_delta_rule": lambda q, k, v, g, gh, beta, lam, s, impl: ops.gated_delta_rule(
            q, unit(k), v, gh, beta, segment_ids=s, impl=impl)[0],
        "ccq_query": lambda q, k, v, g, gh, beta, lam, s, impl: ops.ccq_query(q, k, lam, segment_ids=s, impl=impl)[0],
        "ccq_gla": lambda q, k, v, g, gh, beta, lam, s, impl: ops.ccq_gla(q, k, v, g, lam, segment_ids=s,
                                                                          impl=impl)[0],
        "ccq_gated_delta_rule": lambda q, k, v, g, gh, beta, lam, s, impl: ops.ccq_gated_delta_rule(
            q, unit(k), v, gh, beta, lam, segment_ids=s, impl=impl)[0],
    }
    args = (q, k, v, g, gh, beta, lam, segments)
    worst = 0.0
    for impl in impls:
        for name, op in ops_by_name.items():
            f = lambda *a: op(*a, impl)
            sharded = jax.shard_map(f, mesh=mesh, in_specs=(P("data"),) * 8, out_specs=P("data"))
            loss = lambda fn: (lambda *a: jnp.sum(fn(*a) ** 2))
            got = jax.jit(jax.value_and_grad(loss(sharded), argnums=range(7)))(*args)
            want = jax.jit(jax.value_and_grad(loss(f), argnums=range(7)))(*args)
            errors = [_rel(a, w) for a, w in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
            worst = max(worst, *errors)
            print(impl, name, f"{max(errors):.2e}", flush=True)
        # a replicated initial state: each shard reads it, its gradient sums the shards' shares
        f = lambda q, k, v, g, s0: ops.gla(q, k, v, g, initial_state=jnp.broadcast_to(s0, (q.shape[0], *s0.shape)),
                                           impl=impl)[0]
        sharded = jax.shard_map(f, mesh=mesh, in_specs=(P("data"),) * 4 + (P(),), out_specs=P("data"))
        loss = lambda fn: (lambda *a: jnp.sum(fn(*a) ** 2))
        got = jax.jit(jax.grad(loss(sharded), argnums=4))(q, k, v, g, h0)
        want = jax.jit(jax.grad(loss(f), argnums=4))(q, k, v, g, h0)
        assert float(jnp.max(jnp.abs(want))) > 0
        worst = max(worst, _rel(got, want))
        print(impl, "gla with a shared initial state", f"{_rel(got, want):.2e}", flush=True)
    print("worst", worst)


if __name__ == "__main__":
    main(sys.argv[1].split(","))
