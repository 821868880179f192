"""In-kernel building blocks shared by every kernel, and the one place that launches a kernel.

Kernels index whole-array refs themselves (no BlockSpecs): `ref[b, pl.ds(t0, C), h, pl.ds(k0, BK)]`
loads a `[C, BK]` tile, an int array in place of the slice gathers rows. Every tile is a
power of two (the Triton lowering requires it) and every dot has dims >= 16.

Gates come in three modes: "channel" (`G [B, Tp, H, K]`, GLA), "head" (`G [B, Tp, H]`, the
gated delta rule) and None (no decay: the CCQ statistics). G is the inclusive cumsum of the
log decays inside each chunk, fp32.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as _pltpu  # noqa: F401
from jax.experimental.pallas import triton as pltriton

# Interpret mode imports the TPU interpreter on its first call, which registers config options
# that are part of jit's cache key: importing it here keeps the first jitted call from compiling twice.
del _pltpu

SUB = 16  # secondary chunk: the diagonal blocks whose pairwise decays are formed exactly
HALF = SUB // 2  # inside a diagonal block: the halves whose pairwise decays are formed exactly


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Overrides of the Triton kernels' tiling, the same for every kernel of a call; None keeps each kernel's own
    measured choice (the defaults in each kernel's code; CHANGELOG.md has the sweeps that chose them).

    width: the feature-axis tile width (a power of two >= 16, capped by the padded K or V); num_warps (1-16, a
    power of two) and num_stages (>= 1): the Triton launch parameters. Frozen and hashable: a static argument.
    """

    width: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None

    def __post_init__(self):
        for name, value, ok, expected in (
                ("width", self.width, lambda w: w >= 16 and w & (w - 1) == 0, "a power of two >= 16"),
                ("num_warps", self.num_warps, lambda w: 1 <= w <= 16 and w & (w - 1) == 0, "1, 2, 4, 8 or 16"),
                ("num_stages", self.num_stages, lambda s: s >= 1, ">= 1")):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not ok(value)):
                raise ValueError(f"KernelConfig.{name}: expected None or {expected}, got {value!r}")

    def block(self, d, cap=64):
        """Tile width along a feature axis of width d (a power of two >= 16): the kernel's cap, or the override."""
        return min(d, self.width or cap)


DEFAULT_CONFIG = KernelConfig()


def launch(kernel, out_shape, grid, *, interpret, config, num_warps=4, num_stages=2, aliases=None, name=None):
    """pallas_call over whole-array refs; Triton on a GPU, the same kernel interpreted elsewhere.

    config: a `KernelConfig` whose warps and stages, where set, replace the kernel's own (num_warps, num_stages).
    aliases: {input index: output index} for kernels that update an input in place.
    """
    params = None if interpret else pltriton.CompilerParams(num_warps=config.num_warps or num_warps,
                                                            num_stages=config.num_stages or num_stages)

    def call(*args):
        return pl.pallas_call(kernel, out_shape=varying_outputs(out_shape, args), grid=grid, interpret=interpret,
                              compiler_params=params, input_output_aliases=aliases or {}, name=name)(*args)

    return call


def varying_axes(tree) -> frozenset:
    """The manual mesh axes (inside `jax.shard_map`) that any array of `tree` varies over; empty outside it."""
    return frozenset().union(*(jax.typeof(a).mat.varying for a in jax.tree.leaves(tree)))


def varying_outputs(out_shape, args):
    """out_shape (a ShapeDtypeStruct or a pytree of them) marked to vary over the manual mesh axes that the
    kernel's inputs vary over: inside `jax.shard_map` (with its default checks) each shard's outputs are its own.
    Outside shard_map the shapes are returned as they are."""
    axes = varying_axes(args)
    if not axes:
        return out_shape
    mark = lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=s.sharding,
                                          manual_axis_type=jax.sharding.ManualAxisType(varying=axes))
    return jax.tree.map(mark, out_shape)


def dot(a, b, *, trans_a=False, trans_b=False):
    """a @ b (either side transposed) with fp32 accumulation; fp32 operands use IEEE fp32, never TF32."""
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
    precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    return jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32)


def fp32_dot(a, b, dtype, **kw):
    """a b to about fp32 accuracy for fp32 operands; dtype: the inputs' dtype. fp32 inputs: IEEE. Half-precision
    inputs: each fp32 operand as bf16 hi + lo parts on the tensor cores (an operand already in half precision is
    exact as it is), all products but lo x lo: about 2^-16 relative, far below those inputs' rounding, where Triton
    runs IEEE fp32 dots on FMAs with whole operand rows in registers (1,892 bytes of spills in `wy_gradient`).
    The lo parts are formed after the first product (fewer spills offline than forming them first)."""
    if dtype == jnp.float32:
        return dot(a, b, **kw)

    split = lambda x: x.dtype == jnp.float32
    high = lambda x: x.astype(jnp.bfloat16) if split(x) else x
    low = lambda x: (x - high(x).astype(jnp.float32)).astype(jnp.bfloat16)
    out = dot(high(a), high(b), **kw)
    if split(b):
        out += dot(high(a), low(b), **kw)
    if split(a):
        out += dot(low(a), high(b), **kw)
    return out


def batch_head(axis, heads):
    """(batch row, head) of a program whose grid axis `axis` runs over B * H."""
    bh = pl.program_id(axis)
    return bh // heads, bh % heads


def masked_exp(x, mask):
    """exp(x) where mask, 0 elsewhere (the exponent is masked first, so nothing overflows)."""
    return jnp.exp(jnp.where(mask, x, -jnp.inf))


def iota(n):
    return jax.lax.broadcasted_iota(jnp.int32, (n,), 0)


def tile(ref, b, rows, h, cols):
    """A `[rows, cols]` tile of a `[B, Tp, H, D]` array as fp32."""
    return ref[b, rows, h, cols].astype(jnp.float32)


def gate_tile(g_ref, mode, b, rows, h, cols):
    """G over `rows` (a slice or an index array): [C, BK] per channel, [C, 1] per head, None without gates."""
    if mode == "channel":
        return g_ref[b, rows, h, cols]
    if mode == "head":
        return g_ref[b, rows, h][:, None]
    return None


def gate_row(g_ref, mode, b, t, h, cols):
    """G at one position t: [BK] per channel, [1] per head, None without gates."""
    if mode == "channel":
        return g_ref[b, t, h, cols]
    if mode == "head":
        return g_ref[b, pl.ds(t, 1), h]
    return None


def from_start(G, mask):
    """exp(G_i) * mask_i: a token read against the state entering its chunk ([C, BK] or [C, 1])."""
    m = mask[:, None]
    return m if G is None else jnp.exp(G) * m


def to_end(G, G_last, mask):
    """exp(G_last - G_j) * mask_j: a token's contribution decayed to the end of its chunk."""
    m = mask[:, None]
    return m if G is None else jnp.exp(G_last[None, :] - G) * m


def chunk_decay(G_last, keep):
    """exp(G_last) * keep: how the state entering a chunk survives it ([BK] or [1])."""
    return keep if G_last is None else jnp.exp(G_last) * keep


def same_doc_causal(dd_ref, b, rows, n):
    """[C, C] bool: j <= i and tokens i, j in the same document."""
    d = dd_ref[b, rows]
    i = iota(n)
    return (i[:, None] >= i[None, :]) & (d[:, None] == d[None, :])


def split_gate(refs, gate):
    """(the gate ref or None, the other refs) of a kernel whose refs start with a gate ref when `gate`."""
    refs = list(refs)
    return (refs.pop(0) if gate else None), refs


def store_gated_tiles(qf, kf, G, G_last, reads, writes, q_out, k_out, at):
    """Stores q exp(G) reads and k exp(G_last - G) writes of fp32 tiles at `at` (b, rows, h, ks)."""
    q_out[at] = (qf * from_start(G, reads)).astype(q_out.dtype)
    k_out[at] = (kf * to_end(G, G_last, writes)).astype(k_out.dtype)
