"""What every Pallas backend does around its kernels: padding to block shapes and per-token document masks.

T pads to a multiple of the chunk, K and V to powers of two >= 16 (with zeros that change
nothing); the document index becomes the per-token masks and per-chunk `keep` of
`pallas_kernels.linear_attention`. `Launch` carries a call's static kernel settings
(interpretation and `KernelConfig`) to every kernel it runs.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from pallas_kernels.tiles import SUB, KernelConfig

from ..xla.chunking import doc_masks
from ..xla.numerics import vary_like

f32 = jnp.float32
GATE_FLOOR = -100.0  # the lowest log gate a kernel sees (`floored`)


class Launch(NamedTuple):
    """The static settings of a call's kernels: interpreted or compiled, and the tiling overrides."""

    interpret: bool
    config: KernelConfig

    @property
    def kw(self):
        return dict(interpret=self.interpret, config=self.config)


class Layout(NamedTuple):
    """Per-token masks over the padded sequence [B, Tp] and the per-chunk `keep` [B, N] (see
    `pallas_kernels.linear_attention`), and the padded document index `dd` [B, Tp]."""

    reads: jax.Array
    writes: jax.Array
    keep: jax.Array  # [B, N]: per chunk
    dd: jax.Array


def layout(docs, chunk):
    m = doc_masks(docs, chunk)
    flat = lambda x: x.reshape(docs.shape[0], -1).astype(f32)
    dd = jnp.pad(docs, [(0, 0), (0, -docs.shape[1] % chunk)], mode="edge")
    return Layout(flat(m.reads_state), flat(m.writes_state), flat(m.keep_state), dd)


def check_chunk(chunk, interpret, gpu_max=None):
    """chunk_size as the kernels take it; gpu_max: the largest that compiles for a GPU (None: no limit)."""
    if chunk < SUB or chunk & (chunk - 1):
        raise ValueError(f"chunk_size: impl='pallas' needs a power of two >= {SUB}, got {chunk}")
    if gpu_max is not None and chunk > gpu_max and not interpret:
        raise ValueError(f"chunk_size: impl='pallas' runs the gated delta rule at chunk sizes up to {gpu_max} on a "
                         f"GPU (larger chunks need more shared memory than an H100/H200 block has), got {chunk}")
    return chunk


def width(d):
    """Feature width after padding: a power of two >= 16 (Triton tiles and tensor-core dots)."""
    return max(16, 1 << (d - 1).bit_length())


def pad(x, length, to_width=None):
    """Zero-pad [B, T, H, ...] to `length` tokens (and the last axis to `to_width`)."""
    pads = [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    if to_width is not None:
        pads[-1] = (0, to_width - x.shape[-1])
    return jnp.pad(x, pads)


def pad_state(s, kp, vp):
    return jnp.pad(s.astype(f32), [(0, 0), (0, 0), (0, kp - s.shape[2]), (0, vp - s.shape[3])])


def per_chunk(x, chunk):
    """[B, Tp, *] -> [B, N, C, *]."""
    return x.reshape(x.shape[0], -1, chunk, *x.shape[2:])


def floored(g):
    """The log gates as the kernels take them: fp32, at least `GATE_FLOOR`. The kernels decay by differences of
    in-chunk cumsums, which -inf turns into NaN (-inf - -inf) and very negative gates into lost precision (the
    cumsums' rounding grows with their size); exp(GATE_FLOOR) = 3.7e-44 is a decay of 0 to fp32 all the same."""
    return jnp.maximum(g.astype(f32), GATE_FLOOR)


def chunk_cumsum(g, chunk):
    """Inclusive cumsum of the log gates inside each chunk, fp32 ([B, Tp, H, *]). The ops' gates reach it `floored`;
    the CCQ read's all-zero gates do not (a floor on a constant made XLA fold the whole cumsum: minutes to compile)."""
    return jnp.cumsum(per_chunk(g.astype(f32), chunk), axis=2).reshape(g.shape)


def recompute_from(residuals):
    """The residuals behind an optimization barrier, so that what a backward pass recomputes from them (the
    states, w and u, ...) is not merged with the forward's identical computation by XLA, which would keep the
    forward's results alive until the backward instead (the Gated DeltaNet states of every layer)."""
    return jax.lax.optimization_barrier(residuals)


class Padded(NamedTuple):
    """A backbone's padded inputs: chunk, Tp, padded K, [q, k, v] in one dtype, h0 (varying like them inside
    shard_map), and undo(o, final_state), which cuts the padding off again."""

    chunk: int
    length: int
    key_width: int
    qkv: list
    h0: jax.Array
    undo: object


def backbone_inputs(q, k, v, initial_state, chunk_size, interpret, gpu_max_chunk=None):
    """`Padded` inputs of a backbone; gpu_max_chunk: `check_chunk`'s gpu_max."""
    t, dk, dv = q.shape[1], q.shape[-1], v.shape[-1]
    chunk = check_chunk(chunk_size, interpret, gpu_max_chunk)
    tp, kp, vp = t + (-t % chunk), width(dk), width(dv)
    dtype = jnp.result_type(q, k, v)
    padded = [pad(x.astype(dtype), tp, w) for x, w in ((q, kp), (k, kp), (v, vp))]
    undo = lambda o, final: (o[:, :t, :, :dv], final[:, :, :dk, :dv])
    # the state varies like the inputs inside shard_map (the custom VJPs' cotangents must match their inputs)
    return Padded(chunk, tp, kp, padded, vary_like(pad_state(initial_state, kp, vp), padded), undo)
