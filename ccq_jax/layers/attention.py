"""Softmax attention with RoPE (fla's `Attention` layer): the Transformer's mixer and a hybrid's attention layers.

q, k, v projections (`qkv_bias`: with biases, as fla's option; `num_kv_heads < num_heads`:
grouped-query attention), rotary embeddings (GPT-NeoX half rotation, `rope_theta`) on the first
`rotary_dim` channels of each head (None: all of them, as fla; fewer: partial RoPE as Qwen3-Next's
`partial_rotary_factor`, the rest passing unrotated; 0: NoPE), `ccq_jax.ops.attention` (`sdpa_impl`:
`jax.nn.dot_product_attention` with cuDNN flash attention on GPUs for "cudnn", XLA's reference form for "xla", JAX's
choice for None; JAX's Pallas splash attention on TPUs for "splash", interpreted on a CPU unless `interpret=False`
lowers it for a TPU, a ValueError on a GPU), an optional
output gate (`output_gate`: o * sigmoid(g_proj(x)) per channel before `o_proj`, Qwen3-Next's gated
attention with the gate as its own projection `g_proj`), `o_proj`. `window_size` W (None: full
attention) makes each token attend to itself and the W - 1 tokens before it (fla's, i.e. flash-attn's
window (W - 1, 0)). Positions restart at 0 in every document of a packed row, and tokens attend only
within their document.

With a `KVCache` the first document of the call continues the cached one (its positions continue
from `cache.position`). Full attention writes the new keys and values at slot `cache.index` and the
queries attend over every filled slot of their document. A windowed layer's cache holds only the
last min(W, max_length) tokens, as a ring (token t in slot t mod S): the queries attend over those
slots and the call's own keys, and the call's last tokens then overwrite the oldest slots. These cache paths
attend with an explicit mask of the slots, which splash attention does not take: with `sdpa_impl="splash"` they
run `jax.nn.dot_product_attention` with JAX's choice of implementation (XLA on a TPU), as decoding does anyway.

Under a mesh that splits sequences over the `context` axis of its `axes` (`ccq_jax.ops.OpsAxes`, the model's
`KernelPolicy.axes`, as the linear layers' ops and short convolutions learn it; `ccq_jax.ops.sharding`), a call
without a cache runs on each device's tokens (and its rows and key/value heads, as the ops split batch and heads):
the devices all-gather the segment ids (each computes the documents and their positions over the whole sequence),
rotate their own queries and keys at those global, document-relative positions, and all-gather the keys and
values; each device's queries then attend over the whole sequence with the mask of their global positions
(causal, within the document, within the window). The gradients of the gathered keys and values come back by the
all-gather's transpose, a reduce-scatter. The mask of those global positions depends on the device's index, so
this path too runs JAX's choice of implementation under `sdpa_impl="splash"`.
"""

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from ccq_jax import checks as check
from ccq_jax.layers.cache import KVCache
from ccq_jax.layers.params import linear
from ccq_jax.layers.shapes import split_heads
from ccq_jax.ops import SDPA_IMPLS, OpsAxes, attention, doc_ids, sharding
from ccq_jax.ops.internals import visible


def attention_head_dim(hidden_size, num_heads, num_kv_heads=None, rotary_dim=None, *, prefix="") -> int:
    """Validate attention's sizes (ValueError naming the field, `prefix` + its name for the fields of a hybrid's
    attention entry, e.g. "attn."); returns D / H."""
    check.integer("hidden_size", hidden_size, minimum=1)
    check.integer(f"{prefix}num_heads", num_heads, minimum=1)
    check.integer(f"{prefix}num_kv_heads", num_kv_heads, minimum=1, optional=True)
    check.integer(f"{prefix}rotary_dim", rotary_dim, minimum=0, optional=True)
    if hidden_size % num_heads:
        if prefix:
            raise ValueError(f"{prefix}num_heads: must divide hidden_size = {hidden_size}, got {num_heads}")
        raise ValueError(f"hidden_size: must be divisible by num_heads = {num_heads}, got {hidden_size}")
    if num_kv_heads is not None and num_heads % num_kv_heads:
        raise ValueError(f"{prefix}num_kv_heads: must divide {prefix}num_heads = {num_heads}, got {num_kv_heads}")
    head_dim = hidden_size // num_heads
    if rotary_dim is None and head_dim % 2:
        name = f"{prefix}num_heads" if prefix else "hidden_size"
        raise ValueError(f"{name}: hidden_size / num_heads = {head_dim} must be even for RoPE")
    if rotary_dim is not None and (rotary_dim > head_dim or rotary_dim % 2):
        raise ValueError(f"{prefix}rotary_dim: expected an even number of channels <= the head dim "
                         f"hidden_size / num_heads = {head_dim} (0: no RoPE), got {rotary_dim}")
    return head_dim


def rotary(x: jax.Array, positions: jax.Array, theta: float, dim: int | None = None) -> jax.Array:
    """RoPE on x [B, T, H, D] at integer positions [B, T]: rotate (x[:D/2], x[D/2:]) pairs, fp32 angles; with
    `dim` < D only the first `dim` channels, as (x[:dim/2], x[dim/2:dim]) pairs (0: x unchanged)."""
    if dim is not None and dim < x.shape[-1]:
        return x if dim == 0 else jnp.concatenate([rotary(x[..., :dim], positions, theta), x[..., dim:]], axis=-1)
    half = x.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[..., None, None] * inv_freq  # [B, T, 1, D/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def _doc_positions(docs):
    """Position of each token within its document (0 at every document start)."""
    t = jnp.arange(docs.shape[1])
    starts = jnp.concatenate([jnp.ones_like(docs[:, :1], bool), docs[:, 1:] != docs[:, :-1]], axis=1)
    return t - jax.lax.cummax(jnp.where(starts, t, 0), axis=1)


class Attention(nnx.Module):
    def __init__(self, hidden_size: int, *, num_heads: int = 32, num_kv_heads: int | None = None,
                 rope_theta: float = 10000.0, sdpa_impl: str | None = None, qkv_bias: bool = False,
                 window_size: int | None = None, rotary_dim: int | None = None, output_gate: bool = False,
                 initializer_range: float = 0.02, dtype=None, param_dtype=jnp.float32, rngs: nnx.Rngs,
                 axes: OpsAxes = OpsAxes(), interpret: bool | None = None):
        self.axes = axes  # the mesh axes it splits over (see the module docstring)
        if sdpa_impl not in SDPA_IMPLS:
            raise ValueError(f"sdpa_impl: expected one of {list(SDPA_IMPLS)}, got {sdpa_impl!r}")
        if interpret is not None and not isinstance(interpret, bool):
            raise ValueError(f"interpret: expected None, True or False, got {interpret!r}")
        self.interpret = interpret  # splash attention's (the kernel policy's `interpret`); no other impl runs one
        self.head_dim = attention_head_dim(hidden_size, num_heads, num_kv_heads, rotary_dim)
        check.integer("window_size", window_size, minimum=1, optional=True)
        for name, flag in (("qkv_bias", qkv_bias), ("output_gate", output_gate)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name}: expected a bool, got {flag!r}")
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.rope_theta, self.sdpa_impl = rope_theta, sdpa_impl
        self.window_size, self.rotary_dim, self.output_gate = window_size, rotary_dim, output_gate
        self.dtype, self.param_dtype = dtype, param_dtype
        kw = dict(std=initializer_range, rngs=rngs, dtype=dtype, param_dtype=param_dtype)
        kv_dim = self.num_kv_heads * self.head_dim
        self.q_proj = linear(hidden_size, hidden_size, ("embed", "heads"), use_bias=qkv_bias, **kw)
        self.k_proj = linear(hidden_size, kv_dim, ("embed", "heads"), use_bias=qkv_bias, **kw)
        self.v_proj = linear(hidden_size, kv_dim, ("embed", "heads"), use_bias=qkv_bias, **kw)
        self.o_proj = linear(hidden_size, hidden_size, ("heads", "embed"), **kw)
        if output_gate:
            self.g_proj = linear(hidden_size, hidden_size, ("embed", "heads"), **kw)

    def init_cache(self, batch_size: int, max_length: int) -> KVCache:
        """Empty slots: `max_length` of them, or min(window_size, max_length) for a windowed layer."""
        check.integer("max_length", max_length, minimum=1)
        slots = max_length if self.window_size is None else min(self.window_size, max_length)
        dtype = jnp.dtype(self.dtype or self.param_dtype)
        kv = jnp.zeros((batch_size, slots, self.num_kv_heads, self.head_dim), dtype)
        zeros = jnp.zeros((batch_size,), jnp.int32)
        return KVCache(kv, kv, jnp.full((batch_size, slots), -1, jnp.int32), jnp.zeros((), jnp.int32),
                       zeros, zeros)

    def _attend(self, q, k, v, mask):
        """Attention with an explicit mask [B, 1, Tq, Tk] (the cache and context-parallel paths): splash attention
        takes none, so under sdpa_impl="splash" JAX chooses (see the module docstring)."""
        return attention(q, k, v, mask=mask, impl=None if self.sdpa_impl == "splash" else self.sdpa_impl)

    def __call__(self, x: jax.Array, *, segment_ids: jax.Array | None = None, cache: KVCache | None = None):
        """x: [B, T, D] -> (y [B, T, D], updated cache or None when `cache` is None)."""
        b, t, _ = x.shape
        q, k, v = (split_heads(p(x), self.head_dim) for p in (self.q_proj, self.k_proj, self.v_proj))
        axis = None if cache is not None else sharding.mesh_axis(self.axes, t, "x")
        if axis is not None:
            return self._output(x, self._attend_split(q, k, v, segment_ids, axis)), None
        docs = doc_ids(segment_ids, b, t)
        positions = _doc_positions(docs)
        if cache is not None:
            positions = jnp.where(docs == 0, cache.position[:, None] + jnp.arange(t), positions)
            docs = cache.doc[:, None] + docs
        q, k = (rotary(a, positions, self.rope_theta, self.rotary_dim) for a in (q, k))
        new_cache = None
        if cache is None:
            splash = self.sdpa_impl == "splash"
            o = attention(q, k, v, segment_ids=segment_ids, window=self.window_size, impl=self.sdpa_impl,
                          interpret=self.interpret if splash else None, axes=self.axes if splash else None)
        elif self.window_size is None:
            o, new_cache = self._attend_cached(q, k, v, docs, cache)
        else:
            o, new_cache = self._attend_window(q, k, v, docs, cache)
        if new_cache is not None:
            new_cache = new_cache._replace(position=positions[:, -1] + 1, doc=docs[:, -1])
        return self._output(x, o), new_cache

    def _output(self, x, o):
        """o_proj of the heads' outputs o [B, T, H, D / H], gated by sigmoid(g_proj(x)) with `output_gate`."""
        o = o.reshape(*o.shape[:2], -1)
        if self.output_gate:
            o = o * jax.nn.sigmoid(self.g_proj(x)).astype(o.dtype)
        return self.o_proj(o)

    def _attend_split(self, q, k, v, segment_ids, axis):
        """Attention of q [B, T, H, D / H] over k, v with T split over the mesh axis `axis` (see the module
        docstring); rows and heads split as `ccq_jax.ops.sharding.local` splits them (the heads by the axes that
        divide the key/value heads, so each device keeps whole groups of grouped-query attention)."""
        mesh = sharding.split_mesh(self.axes)
        rows, heads = sharding.splits(mesh, self.axes, q.shape[0], self.num_kv_heads)
        window = self.window_size

        def body(q, k, v, segment_ids):
            b, t = q.shape[:2]
            start = jax.lax.axis_index(axis) * t
            ids = None if segment_ids is None else jax.lax.all_gather(segment_ids, axis, axis=1, tiled=True)
            docs = doc_ids(ids, b, t * jax.lax.axis_size(axis))  # [B, T]: the whole sequence's
            own = lambda a: jax.lax.dynamic_slice_in_dim(a, start, t, axis=1)
            q, k = (rotary(a, own(_doc_positions(docs)), self.rope_theta, self.rotary_dim) for a in (q, k))
            k, v = (jax.lax.all_gather(a, axis, axis=1, tiled=True) for a in (k, v))
            gap = (start + jnp.arange(t))[:, None] - jnp.arange(docs.shape[1])[None, :]
            return self._attend(q, k, v, visible(gap, own(docs), docs, window))

        token = P(rows, axis, heads)
        ids = None if segment_ids is None else P(rows, axis)
        return sharding.manual(body, mesh, (token, token, token, ids), token)(q, k, v, segment_ids)

    def _attend_cached(self, q, k, v, docs, cache):
        """Full attention from a cache: the new keys written at slot `cache.index`, then read with every slot."""
        t = q.shape[1]
        at = (0, cache.index, 0, 0)
        k = jax.lax.dynamic_update_slice(cache.key, k.astype(cache.key.dtype), at)
        v = jax.lax.dynamic_update_slice(cache.value, v.astype(cache.value.dtype), at)
        slot_doc = jax.lax.dynamic_update_slice(cache.slot_doc, docs.astype(jnp.int32), (0, cache.index))
        gap = (cache.index + jnp.arange(t))[:, None] - jnp.arange(k.shape[1])[None, :]  # [T, S]: query slot - slot
        mask = visible(gap, docs, slot_doc, None)
        return self._attend(q, k, v, mask), KVCache(k, v, slot_doc, cache.index + t, cache.position, cache.doc)

    def _attend_window(self, q, k, v, docs, cache):
        """Windowed attention from a ring cache of S slots (token t in slot t mod S): the queries read the slots
        and the call's own keys (S + T of them), then the call's last min(T, S) tokens overwrite their slots."""
        t, slots = q.shape[1], cache.key.shape[1]
        times = cache.index + jnp.arange(t)  # [T]: the call's tokens' index in the stream the cache has seen
        slot_time = cache.index - 1 - (cache.index - 1 - jnp.arange(slots)) % slots  # last token written there
        gap = times[:, None] - jnp.concatenate([slot_time, times])[None, :]  # [T, S + T]
        key_doc = jnp.concatenate([cache.slot_doc, docs], axis=1)  # [B, S + T] (-1: a slot never written)
        mask = visible(gap, docs, key_doc, self.window_size)
        keys = jnp.concatenate([cache.key, k.astype(cache.key.dtype)], axis=1)
        values = jnp.concatenate([cache.value, v.astype(cache.value.dtype)], axis=1)
        o = self._attend(q, keys, values, mask)
        kept = min(t, slots)
        where = (cache.index + jnp.arange(t - kept, t)) % slots
        new = KVCache(cache.key.at[:, where].set(keys[:, slots + t - kept:]),
                      cache.value.at[:, where].set(values[:, slots + t - kept:]),
                      cache.slot_doc.at[:, where].set(docs[:, t - kept:].astype(jnp.int32)),
                      cache.index + t, cache.position, cache.doc)
        return o, new
