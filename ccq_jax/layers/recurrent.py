"""What GLA and Gated DeltaNet layers share: short convs, the cache, the (CCQ) read through `ccq_jax.ops`.

One forward serves training, prefill and decoding: with `cache=None` the layer reads from a
zero state and returns no cache; with a cache it starts from the cached state, statistics and
conv tails (they belong to the document at position 0, the ops' convention) and returns the
updated cache. The layer's `KernelPolicy` picks the implementation: a call with one token uses its
`decode_impl` (default: the recurrent form), longer calls its `impl` (default: the chunked form).

Inside `nnx.capture(model, nnx.Intermediate)` every layer also records what its read uses:
the keys and queries `[B, T, H, K]` under the names `keys` and `queries`, and with CCQ on the gate
`[B, T, H]` under `ccq_lambda` (the Delta-mu and read-engagement diagnostics of `eval`); plain calls
record nothing.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers.cache import RecurrentCache
from ccq_jax.layers.ccq import CCQGate
from ccq_jax.layers.conv import ShortConvolution
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.remat import kept_output
from ccq_jax.layers.shapes import split_heads
from ccq_jax.ops import CCQStats


class RecurrentMixer(nnx.Module):
    """Base of the linear-attention layers; subclasses call `_setup`, then `_project`, `_read` and `_output`."""

    def _setup(self, *, state_heads, head_k_dim, head_v_dim, conv_channels, conv_size, ccq, kernel, std, rngs,
               dtype, param_dtype, recompute):
        """conv_channels: (q, k, v) widths for the short convs, or None for no convs; kernel: the `KernelPolicy`;
        recompute: see `ccq_jax.layers.remat`."""
        if not isinstance(kernel, KernelPolicy):
            raise ValueError(f"kernel: expected a ccq_jax.layers.KernelPolicy, got {kernel!r}")
        self.recompute = recompute
        self.state_heads, self.head_k_dim, self.head_v_dim = state_heads, head_k_dim, head_v_dim
        self.kernel_policy = kernel
        self.dtype, self.param_dtype = dtype, param_dtype
        self.ccq_config = ccq
        self.use_short_conv = conv_channels is not None
        if self.use_short_conv:
            kw = dict(std=std, rngs=rngs, dtype=dtype, param_dtype=param_dtype, recompute=recompute, axes=kernel.axes)
            self.q_conv1d, self.k_conv1d, self.v_conv1d = (ShortConvolution(c, conv_size, **kw) for c in conv_channels)
        if ccq is not None:
            self.ccq = CCQGate(state_heads, head_k_dim, ccq, param_dtype=param_dtype, recompute=recompute)

    @property
    def _ccq_on(self) -> bool:
        return self.ccq_config is not None and self.ccq_config.active

    def init_cache(self, batch_size: int, max_length: int | None = None) -> RecurrentCache:
        """Zeros; the size does not depend on `max_length` (accepted for a uniform interface)."""
        del max_length
        b, h, dk, dv = batch_size, self.state_heads, self.head_k_dim, self.head_v_dim
        stats = None
        if self._ccq_on:
            stats = CCQStats(jnp.zeros((b, h, dk, dk), jnp.float32), jnp.zeros((b, h, dk), jnp.float32),
                             jnp.zeros((b, h), jnp.float32))
        conv = None
        if self.use_short_conv:
            dtype = jnp.dtype(self.dtype or self.param_dtype)
            conv = tuple(m.init_cache(b, dtype) for m in (self.q_conv1d, self.k_conv1d, self.v_conv1d))
        return RecurrentCache(jnp.zeros((b, h, dk, dv), jnp.float32), stats, conv)

    def _project(self, x, segment_ids, cache, *, silu_without_conv):
        """q, k, v projections of x `[B, T, D]`, through the short convs (SiLU) when the layer has them, else
        through SiLU alone if `silu_without_conv`. Returns (q, k, v, new conv tails or None)."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if not self.use_short_conv:
            return (*((jax.nn.silu(t) for t in (q, k, v)) if silu_without_conv else (q, k, v)), None)
        tails = cache.conv if cache is not None else (None, None, None)
        outs = [m(t, segment_ids, tail) for m, t, tail in zip((self.q_conv1d, self.k_conv1d, self.v_conv1d), (q, k, v),
                                                              tails)]
        new_tails = tuple(t.astype(old.dtype) for (_, t), old in zip(outs, tails)) if cache is not None else None
        return outs[0][0], outs[1][0], outs[2][0], new_tails

    def _output(self, o, x, norm, gated):
        """o_proj(norm(o, g_proj(x))) (norm(o) when not `gated`): `[B, T, H, V]` -> `[B, T, D]`."""
        o = norm(o, split_heads(self._output_gate(x), self.head_v_dim)) if gated else norm(o)
        return self.o_proj(o.reshape(*o.shape[:2], -1))

    def _output_gate(self, x):
        """The output gate's projection of x `[B, T, D]` -> `[B, T, H*V]` (fla's `g_proj`; low-rank in KDA)."""
        return self.g_proj(x)

    def _read(self, reads, q, k, args, *, segment_ids, cache):
        """reads: (the backbone's op, its CCQ op), e.g. (`ops.gla`, `ops.ccq_gla`); the first, or the second when
        CCQ is on, from the cached state.

        Returns (o [B, T, H, V], final state or None, final statistics or None).
        """
        capturing = hasattr(self, "__captures__")  # only inside nnx.capture: a plain sow would store on the module
        if capturing:
            self.sow(nnx.Intermediate, "keys", k)
            self.sow(nnx.Intermediate, "queries", q)
        kw = dict(segment_ids=segment_ids, output_final_state=cache is not None,
                  initial_state=None if cache is None else cache.state, **self.kernel_policy.read_options(q.shape[1]))
        if not self._ccq_on:
            o, state = reads[0](q, k, *args, **kw)
            return kept_output(o), state, None
        cfg = self.ccq_config
        lam = self.ccq(q)
        if capturing:
            self.sow(nnx.Intermediate, "ccq_lambda", lam)
        o, (state, stats) = reads[1](
            q, k, *args, lam, read=cfg.policy, centered=cfg.centered, normalize_keys=cfg.normalize_keys,
            initial_stats=None if cache is None else cache.stats, output_final_stats=cache is not None, **kw)
        return kept_output(o), state, stats

    @staticmethod
    def _new_cache(cache, state, stats, conv):
        return None if cache is None else RecurrentCache(state, stats, conv)
