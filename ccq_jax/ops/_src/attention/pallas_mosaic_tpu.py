"""Splash attention (JAX's Pallas TPU kernel, `jax.experimental.pallas.ops.tpu.splash_attention`) for `attention`.

The kernel takes one row: q [H, T, D], k and v [Hkv, T, D] (grouped-query attention natively: query head h reads
key/value head h // (H / Hkv)), a static mask per head (`CausalMask`, or `LocalMask` with the window (W - 1, 0))
and `SegmentIds` (queries see keys of the same id only); it does not scale the logits. This glue scales q by
D**-0.5, vmaps the kernel over the rows, pads T with zeros to a multiple of the kernel's blocks (`BLOCK`: the
padded keys come after every real query, so the causal mask hides them, and the padded queries' outputs are cut
off) and, under a mesh that `axes` splits rows or key/value heads over, runs it on each device's slice
(`sharding.manual`, as the layer's context-parallel path does: Pallas calls are not partitioned by XLA).
"""

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as sa
from jax.sharding import PartitionSpec as P

from ... import sharding
from ..xla.numerics import doc_ids

BLOCK = 128  # the kernel's default blocks (BlockSizes.get_default), forward and backward


def interprets(interpret):
    """Whether the kernel runs interpreted: as asked, else exactly on a CPU; compiled only for a TPU (lowered for
    one from a CPU with interpret=False), so a GPU must ask for the interpreter."""
    platform = jax.default_backend()
    if interpret is not None and not isinstance(interpret, bool):
        raise ValueError(f"interpret: expected None, True or False, got {interpret!r}")
    if interpret is None and platform not in ("tpu", "cpu"):
        raise ValueError(f"sdpa_impl: 'splash' is a TPU kernel and does not run on platform {platform!r}; use "
                         f"'cudnn' or 'xla' there (or interpret=True, slowly)")
    return platform == "cpu" if interpret is None else interpret


def splash(q, k, v, segment_ids, window, *, interpret, axes):
    """Causal attention of q [B, T, H, D] over k, v [B, T, Hkv, D] within documents and `window` (see above)."""
    interpret = interprets(interpret)
    b, t, _, d = q.shape
    padded = -(-t // BLOCK) * BLOCK
    docs = doc_ids(segment_ids, b, t)
    q = (q.astype(jnp.float32) * d ** -0.5).astype(q.dtype)
    pad = lambda a: jnp.pad(a, ((0, 0), (0, padded - t)) + ((0, 0),) * (a.ndim - 2))
    q, k, v, docs = (pad(a) for a in (q, k, v, docs))
    docs = None if segment_ids is None else docs  # one document: the kernel's causal mask alone
    shape = (padded, padded)
    head_mask = sa.CausalMask(shape) if window is None else sa.LocalMask(shape, (window - 1, 0), 0)

    def rows(q, k, v, docs):
        """The kernel on q [b, T, h, D] (a device's rows and heads under a mesh), vmapped over the rows."""
        kernel = sa.make_splash_mha(sa.MultiHeadMask([head_mask] * q.shape[2]), head_shards=1, q_seq_shards=1,
                                    interpret=interpret)
        one = lambda q, k, v, ids: kernel(q, k, v, segment_ids=None if ids is None else sa.SegmentIds(ids, ids))
        return jax.vmap(one)(*(a.swapaxes(1, 2) for a in (q, k, v)), docs).swapaxes(1, 2)

    mesh = sharding.split_mesh(axes)
    row_axes, head_axes = sharding.splits(mesh, axes, b, k.shape[2])
    if row_axes is None and head_axes is None:
        o = rows(q, k, v, docs)
    else:
        token = P(row_axes, None, head_axes)
        ids = None if docs is None else P(row_axes)
        o = sharding.manual(rows, mesh, (token, token, token, ids), token)(q, k, v, docs)
    return o[:, :t]
