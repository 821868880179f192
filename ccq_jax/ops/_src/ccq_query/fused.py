"""The CCQ read feeding a backbone under one custom VJP, on any kernel backend: the keys' two gradients (the
backbone's and the read's) are summed on chip (`ccq_read.key_grad`) instead of by XLA.

A backbone enters as its custom-VJP halves on padded inputs (`Backbone`); `ccq_gla` and
`ccq_gated_delta_rule`'s kernel modules build one from their backbone's VJP and call `fused_op`.
"""

import functools
from typing import Callable, NamedTuple

import jax

from ..pallas.layout import layout, pad
from .pallas_triton import read_backward, read_forward, stats_inputs, stats_outputs


class Backbone(NamedTuple):
    """A backbone's custom-VJP halves on padded inputs: forward(q, k, *rest, h0, lay) -> ((o, final), residuals);
    backward(residuals, (do, dfinal)) -> (dq, dk, *drest, dh0, None)."""

    forward: Callable
    backward: Callable

    @classmethod
    def bind(cls, vjp_forward, vjp_backward, *static):
        """The halves of a backbone's kernel module with its static arguments bound: vjp_forward(*inputs,
        *static) and vjp_backward(*static, residuals, cotangents)."""
        return cls(lambda *args: vjp_forward(*args, *static), lambda res, cts: vjp_backward(*static, res, cts))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _fused(backbone, chunk, centered, normalize, run, q, k, lam, cov0, sum0, count0, rest, h0, lay):
    """(o, final state, final statistics): the backbone reading with the CCQ-cleaned query on padded inputs (rest:
    its other inputs, v first)."""
    return _fused_forward(backbone, chunk, centered, normalize, run, q, k, lam, cov0, sum0, count0, rest, h0, lay)[0]


def _fused_forward(backbone, chunk, centered, normalize, run, q, k, lam, cov0, sum0, count0, rest, h0, lay):
    (q_clean, stats), read_res = read_forward(q, k, lam, cov0, sum0, count0, lay, chunk, centered, normalize, run)
    (o, final), backbone_res = backbone.forward(q_clean, k, *rest, h0, lay)
    return (o, final, stats), (read_res, backbone_res)


def _fused_backward(backbone, chunk, centered, normalize, run, res, cts):
    read_res, backbone_res = res
    do, dfinal, dstats = cts
    dq_clean, dk_backbone, *drest, dh0, _ = backbone.backward(backbone_res, (do, dfinal))
    read_grads = read_backward(read_res, dq_clean, dstats, chunk, normalize, run, dk_rest=dk_backbone)
    return (*read_grads, tuple(drest), dh0, None)


_fused.defvjp(_fused_forward, _fused_backward)


def fused_op(backbone, inputs, rest, lam, initial_stats, centered, normalize_keys, docs, run):
    """A fused CCQ op given the backbone's `Padded` inputs and its other inputs `rest` (padded):
    o, (final state, final statistics)."""
    q, k, _ = inputs.qkv
    o, final, stats = _fused(backbone, inputs.chunk, centered, normalize_keys, run, q, k, pad(lam, inputs.length),
                             *stats_inputs(initial_stats, inputs.key_width, (q, k)), rest, inputs.h0,
                             layout(docs, inputs.chunk))
    o, final = inputs.undo(o, final)
    return o, (final, stats_outputs(stats, initial_stats.key_sum.shape[-1]))
