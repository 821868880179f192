"""The kernels inside `jax.shard_map` and on a set mesh, where each op wraps its kernel call in a shard_map of its
own (`ccq_jax.ops.sharding.local`): interpreted on 4 CPU devices, the same outputs and gradients as unsharded
(tests/ops/shard_map_check.py; tests/pallas/test_gpu.py runs it compiled on a GPU); and inside a shard_map that
keeps its default varying-axes checks, every op's forward and gradient on every backend compiled (traced here: each
kernel output and custom-VJP cotangent varies like the inputs), and GLA on the Mosaic TPU interpreter.

JAX's Triton interpreter (jax 0.11.2) binds its dynamic slices without varying-axis casts, so the interpreted
Triton kernels still need `check_vma=False` (as shard_map_check.py and `sharding.local` pass)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import ccq_jax.ops as ops
from tests.builders import rel_rms, shard_map_check

CALLS = {
    "gla": lambda q, k, v, g, lam, **kw: ops.gla(q, k, v, g, **kw)[0],
    "gated_delta_rule": lambda q, k, v, g, lam, **kw: ops.gated_delta_rule(q, k, v, g[..., 0], -g[..., 1], **kw)[0],
    "ccq_query": lambda q, k, v, g, lam, **kw: ops.ccq_query(q, k, lam, **kw)[0],
    "ccq_gla": lambda q, k, v, g, lam, **kw: ops.ccq_gla(q, k, v, g, lam, **kw)[0],
    "ccq_gated_delta_rule": lambda q, k, v, g, lam, **kw: ops.ccq_gated_delta_rule(q, k, v, g[..., 0], -g[..., 1],
                                                                                   lam, **kw)[0],
    # the erase vector a = k
    "generalized_delta_rule": lambda q, k, v, g, lam, **kw: ops.generalized_delta_rule(q, k, v, g, k, **kw)[0],
    "ccq_generalized_delta_rule": lambda q, k, v, g, lam, **kw: ops.ccq_generalized_delta_rule(q, k, v, g, k, lam,
                                                                                               **kw)[0],
}
BACKENDS = {"pallas_triton": list(CALLS), "pallas_mosaic_gpu": ["gated_delta_rule", "ccq_gated_delta_rule"],
            "pallas_mosaic_tpu": list(CALLS)}


def test_kernels_inside_shard_map_and_on_a_mesh_match_the_unsharded_ops():
    assert shard_map_check(["pallas"], cpu_devices=4) < 1e-5


def _checked(fn, n):
    """`fn` inside a shard_map over a one-device mesh with the default checks (its axis is manual, as on many)."""
    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    return jax.shard_map(fn, mesh=mesh, in_specs=(P("data"),) * n, out_specs=P("data"))


@pytest.mark.parametrize("tokens", [1, 128])
@pytest.mark.parametrize("impl", list(BACKENDS))
def test_compiled_kernels_trace_inside_shard_map_with_its_checks(impl, tokens):
    """Forward and gradient of every op on the backend, compiled (interpret=False: for a GPU, or a TPU), at a decode
    step (T = 1: the step kernels) and at two chunks, in bf16 with K = V = 128 (the Mosaic GPU passes' shapes)."""
    b, h, d = 2, 2, 128
    bf16 = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
    args = (bf16(b, tokens, h, d),) * 3 + (jax.ShapeDtypeStruct((b, tokens, h, d), jnp.float32),
                                           jax.ShapeDtypeStruct((b, tokens, h), jnp.float32))
    for name in BACKENDS[impl]:
        op = lambda *x, name=name: CALLS[name](*x, impl=impl, interpret=False).astype(jnp.float32)
        loss = lambda *x: jnp.sum(_checked(op, 5)(*x) ** 2)
        jax.jit(jax.grad(loss, argnums=tuple(range(5)))).trace(*args)


def test_gla_on_the_mosaic_tpu_interpreter_inside_shard_map_with_its_checks():
    r = np.random.default_rng(0)
    x = lambda *s: jnp.asarray(r.standard_normal(s), jnp.float32)
    q, k, v = x(2, 40, 2, 16), x(2, 40, 2, 16), x(2, 40, 2, 32)
    g = jax.nn.log_sigmoid(x(2, 40, 2, 16) + 3.0)
    op = lambda q, k, v, g: ops.gla(q, k, v, g, impl="pallas_mosaic_tpu", interpret=True)[0]
    loss = lambda fn: (lambda *a: jnp.sum(fn(*a) ** 2))
    got = jax.jit(jax.value_and_grad(loss(_checked(op, 4)), argnums=(0, 1, 2, 3)))(q, k, v, g)
    want = jax.jit(jax.value_and_grad(loss(op), argnums=(0, 1, 2, 3)))(q, k, v, g)
    assert max(rel_rms(a, w) for a, w in zip(jax.tree.leaves(got), jax.tree.leaves(want))) < 1e-5
