"""`attention(q, k, v)`: causal softmax attention within documents and an optional sliding window.

q `[B, T, H, D]`, k and v `[B, T, Hkv, D]` (Hkv dividing H: grouped-query attention), the logits scaled by
D**-0.5, each token attending to itself and the tokens before it in its document (`segment_ids [B, T]`: a new
document wherever the id changes), and with `window` W only to the W - 1 tokens before it. `mask` [B, 1, Tq, Tk]
(bool) replaces all of that by an explicit visibility mask (a cache's slots, a context-parallel shard's global
positions). `impl` (`SDPA_IMPLS`): None, "xla" or "cudnn" run `jax.nn.dot_product_attention` with that
implementation; "splash" runs JAX's Pallas TPU splash attention (`pallas_mosaic_tpu.splash`: compiled on a TPU,
interpreted on a CPU or with `interpret=True`, lowered for a TPU from a CPU with `interpret=False`; a ValueError
naming sdpa_impl elsewhere) and takes no explicit mask. `axes` (`OpsAxes`): the mesh axes the splash kernel runs
on each device's rows and key/value heads of (XLA partitions the others itself).
"""

import jax
import jax.numpy as jnp

from ..xla.numerics import doc_ids
from . import pallas_mosaic_tpu

SDPA_IMPLS = (None, "xla", "cudnn", "splash")


def visible(gap, query_docs, key_docs, window):
    """[B, 1, Tq, Tk] mask: the query sees the key where `gap` [Tq, Tk] (the query's index in the stream minus the
    key's) is in [0, window) (`window` None: >= 0) and their documents (`query_docs` [B, Tq], `key_docs` [B, Tk])
    are the same."""
    seen = gap >= 0 if window is None else (gap >= 0) & (gap < window)
    return (seen & (key_docs[:, None, :] == query_docs[:, :, None]))[:, None]


def attention(q, k, v, *, segment_ids=None, window=None, mask=None, impl=None, interpret=None, axes=None):
    """Causal softmax attention of q over k, v (see the module docstring) -> o [B, T, H, D] in q's dtype."""
    if impl not in SDPA_IMPLS:
        raise ValueError(f"sdpa_impl: expected one of {list(SDPA_IMPLS)}, got {impl!r}")
    keys = k.shape[1] if mask is not None else q.shape[1]  # an explicit mask's keys may be others (a cache's)
    if q.ndim != 4 or k.shape != v.shape or k.shape != (q.shape[0], keys, k.shape[2], q.shape[3]) \
            or q.shape[2] % k.shape[2]:
        raise ValueError(f"q, k, v: expected [B, T, H, D] and two [B, T, Hkv, D] (Tk keys with a mask) with Hkv "
                         f"dividing H, got {q.shape}, {k.shape}, {v.shape}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"window: expected a positive int or None, got {window!r}")
    if interpret is not None and impl != "splash":
        raise ValueError(f"interpret: only sdpa_impl='splash' runs a kernel; leave it unset, got {interpret!r}")
    if mask is not None and (segment_ids is not None or window is not None or impl == "splash"):
        raise ValueError("mask: an explicit mask replaces segment_ids and window, and sdpa_impl='splash' takes "
                         "none; pass either mask or segment_ids and window")
    k, v = k.astype(q.dtype), v.astype(q.dtype)
    if impl == "splash":
        return pallas_mosaic_tpu.splash(q, k, v, segment_ids, window, interpret=interpret, axes=axes)
    if mask is None and segment_ids is not None:
        b, t = q.shape[:2]
        docs = doc_ids(segment_ids, b, t)
        mask = visible(jnp.arange(t)[:, None] - jnp.arange(t)[None, :], docs, docs, None)
    return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=mask is None,
                                        local_window_size=None if window is None else (window - 1, 0),
                                        implementation=impl)
