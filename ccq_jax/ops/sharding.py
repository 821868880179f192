"""How the ops run over a mesh: kernels on each device's slice (`local`), and one sequence split over the
devices of a mesh axis (`splits_sequence`, context parallelism). Which mesh axes split what is a value handed to
each op, `axes=OpsAxes(batch=..., heads=..., context=...)` (the training side derives it from its sharding rules:
`train.sharding.OPS_AXES`; the models take it from `KernelPolicy.axes`); this package names no mesh axis itself.

Without `axes` (None, or an empty `OpsAxes`) an op runs as it is, whatever mesh is current: XLA partitions it
(and gathers a Pallas kernel's sharded operands). With `axes`, the current mesh (`jax.sharding.get_abstract_mesh`,
set by `jax.set_mesh` or `jax.sharding.use_abstract_mesh`; the train and eval steps trace under theirs) is split
over exactly those axes; a named axis the current mesh lacks is a ValueError naming `axes`, and with no mesh set
the op runs unsplit.

Kernels on each device's slice: XLA cannot partition a Pallas custom call (given sharded operands it gathers
them and runs the whole kernel on every device). So `local` wraps an op's kernel call in `shard_map` over the
axes of `axes.batch` and `axes.heads`: the kernel's grid then covers one device's rows and heads, and only the
inputs that arrive sharded otherwise are moved. Axes that are already manual (inside a user's `shard_map`), of
size 1, or that do not divide the dimension split nothing; the shard_map is still manual over every mesh axis
(Mosaic TPU kernels refuse to be partitioned over any auto axis), so an axis that splits nothing sees the same
blocks on each of its devices. The reference forms need none of this: XLA partitions them. The wrapper runs with
`check_vma=False`: JAX's Triton interpreter binds the kernels' dynamic slices without varying-axis casts (compiled,
every backend passes the checks: tests/pallas/test_shard_map.py), while the in/out specs already say how every
block varies: split over the batch and head axes, the same on the devices of any other axis.

The layouts the ops share: positional inputs and the first output are per token, `[B, T, H, ...]`; states and
statistics are `[B, H, ...]`; the document index is `[B, T]`.

Context parallelism, one sequence split over the devices of a mesh axis, for every op: inside `jax.shard_map`,
with the time axis T of every per-token input split contiguously over a mesh axis (device d holds tokens
[d T/D, (d+1) T/D)), an op called with `context_axis=` that axis gives each device the outputs of its tokens
exactly as the unsplit op would. Only summaries of the shards cross devices, never keys or values:

1. Each shard's effect on the state entering it is an affine map S -> A S + b, and it depends on k, v, g and
   beta only, not on q (`Shard`'s maps): GLA's A is diagonal (the exponentiated sum of the shard's log decays),
   the gated delta rule's a dense K x K product (the op run from the identity with zero values, beside its own
   state), the CCQ statistics' a 0/1 flag (they are plain sums). b is the state the shard leaves when it starts
   from zero. A document that starts inside the shard, or at its first token, makes A zero.
2. The state entering each shard is the earlier shards' maps composed and applied to the initial state: an
   exclusive scan across the axis (`entering`), by Hillis-Steele over `ppermute`: one shift by a device, then
   ceil(log2 D) rounds that each send one map (the backbone's and the statistics' together); in round r a device
   with no device 2^r places before it keeps what it has.
3. Each shard runs the op, with any `impl`, from that state. Autodiff carries the gradients of the entering
   states back through the same collectives in reverse (ppermute's transpose is the inverse permutation).

With `context_axis`, the final states an op returns are each shard's own: the last shard's is the sequence's.
`splits_sequence` adds this to an op's public function, with the keyword `axes`, and also runs it so when
`axes.context` names an axis of the current mesh of more than one device (not manual): then the op itself
shard_maps its inputs over every mesh axis (the sequence over `axes.context`, the batch and heads as `local` splits
them) and returns the last shard's final states. docs/context_parallel.md counts the bytes and rounds.
"""

import dataclasses
import functools
import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ._src.xla.numerics import HIGHEST, accum_dtype, doc_ids

STATE_KEYWORDS = ("initial_state", "initial_stats")  # an op's states, [B, H, ...]
DOCUMENT_KEYWORDS = ("docs",)  # [B, T]


@dataclasses.dataclass(frozen=True)
class OpsAxes:
    """The mesh axes an op splits over (see the module docstring): `batch` the rows, in this order; `heads` the
    heads (and a short convolution's channels); `context` the sequence (context parallelism), or None. Empty (the
    default): no splitting."""

    batch: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()
    context: str | None = None

    def __post_init__(self):
        for field in ("batch", "heads"):
            names = getattr(self, field)
            if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
                raise ValueError(f"axes.{field}: expected a tuple of mesh axis names, got {names!r}")
        if self.context is not None and not (isinstance(self.context, str) and self.context):
            raise ValueError(f"axes.context: expected a mesh axis name or None, got {self.context!r}")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"axes: a mesh axis splits one dimension only, got {self!r}")

    @property
    def names(self) -> tuple[str, ...]:
        """Every mesh axis named, batch, heads, then context."""
        return (*self.batch, *self.heads, *((self.context,) if self.context is not None else ()))


def split_mesh(axes):
    """The current mesh (`jax.sharding.get_abstract_mesh`) to split over `axes`, or None: no axes (None or an
    empty `OpsAxes`), or no mesh set. A ValueError naming `axes` when it is not an `OpsAxes` or names an axis the
    current mesh lacks."""
    if axes is None:
        return None
    if not isinstance(axes, OpsAxes):
        raise ValueError(f"axes: expected a ccq_jax.ops.OpsAxes or None, got {axes!r}")
    mesh = jax.sharding.get_abstract_mesh()
    if not axes.names or mesh.empty:
        return None
    missing = [name for name in axes.names if name not in mesh.axis_names]
    if missing:
        raise ValueError(f"axes: {missing} are not axes of the current mesh, whose axes are {list(mesh.axis_names)}")
    return mesh


def mesh_axes(mesh, names, size):
    """The axes of `names` that split a dimension of `size` on `mesh`: present, not manual, larger than 1, and
    dividing `size` together with the ones before them."""
    chosen, product = [], 1
    for name in names:
        if name not in mesh.axis_names or name in mesh.manual_axes or mesh.shape[name] == 1:
            continue
        if size % (product * mesh.shape[name]) == 0:
            chosen.append(name)
            product *= mesh.shape[name]
    return tuple(chosen)


def manual(body, mesh, in_specs, out_specs):
    """`jax.shard_map` of `body` over every axis of `mesh` that is not manual already, with `check_vma=False` (see
    the module docstring): what each wrapper of this package's kind runs its per-device work in."""
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         axis_names=set(mesh.axis_names) - set(mesh.manual_axes), check_vma=False)


def splits(mesh, axes, batch, heads):
    """(rows, heads): the mesh axes of `axes.batch` that split `batch` rows and of `axes.heads` that split `heads`
    on `mesh` (`mesh_axes`), each None where none does; (None, None) without a mesh."""
    if mesh is None:
        return None, None
    return mesh_axes(mesh, axes.batch, batch) or None, mesh_axes(mesh, axes.heads, heads) or None


def local(fn, axes=None):
    """`fn(*per_token_inputs, **keywords) -> (per_token_output, states...)`, run by `shard_map` on each device's
    batch rows and heads when the current mesh splits them over `axes` (see the module docstring), else called as
    it is."""

    def run(*inputs, **keywords):
        mesh = split_mesh(axes)
        b, _, h = inputs[0].shape[:3]
        rows, per_head = splits(mesh, axes, b, h)
        if rows is None and per_head is None:
            return fn(*inputs, **keywords)
        token, state, document = P(rows, None, per_head), P(rows, per_head), P(rows)
        arrays = {k: keywords[k] for k in (*STATE_KEYWORDS, *DOCUMENT_KEYWORDS) if k in keywords}
        options = {k: value for k, value in keywords.items() if k not in arrays}
        array_specs = {k: state if k in STATE_KEYWORDS else document for k in arrays}
        body = lambda inputs, arrays: fn(*inputs, **arrays, **options)
        return manual(body, mesh, ((token,) * len(inputs), array_specs), (token, state))(inputs, arrays)

    return run


class Diagonal(NamedTuple):
    """The map S -> a * S + b, `a` broadcast against each leaf of `b` from the left (GLA: a [B, H, K] against the
    state [B, H, K, V]; the statistics: a [B] against cov, key_sum and count)."""

    a: jax.Array
    b: object


class Dense(NamedTuple):
    """The map S -> a @ S + b: a [B, H, K, K] acting on the state b [B, H, K, V] (the gated delta rule)."""

    a: jax.Array
    b: jax.Array


def _expand(a, leaf):
    return a.reshape(a.shape + (1,) * (leaf.ndim - a.ndim))


def then(later, earlier):
    """The map that applies `earlier`, then `later` (both Diagonal or both Dense)."""
    if isinstance(later, Dense):
        product = lambda x, y: jnp.einsum("...ij,...jk->...ik", x, y, precision=HIGHEST)
        return Dense(product(later.a, earlier.a), product(later.a, earlier.b) + later.b)
    return Diagonal(later.a * earlier.a, jax.tree.map(lambda e, l: _expand(later.a, e) * e + l, earlier.b, later.b))


def shifted(tree, offset, axis):
    """Each device's copy of `tree` from the device `offset` places before it on mesh axis `axis` (zeros on the
    first `offset` devices, which have none). A cyclic `ppermute`, its wrapped-around part masked: a full
    permutation also runs under `jax.vmap` with an axis name, where one device simulates every shard."""
    size = jax.lax.axis_size(axis)
    pairs = [(i, (i + offset) % size) for i in range(size)]
    has = jax.lax.axis_index(axis) >= offset
    return jax.tree.map(lambda x: jnp.where(has, jax.lax.ppermute(x, axis, pairs), jnp.zeros((), x.dtype)), tree)


def entering(maps, initial, axis):
    """The states entering this device's shard: the maps of the shards before it, composed in order and applied
    to `initial` (the states entering the first shard).

    maps, initial: dicts of the same keys; each map a `Diagonal` or `Dense` whose `b` has the structure of its
    initial state. An exclusive scan by Hillis-Steele: after a shift by one device (the first device's element
    is the constant map to `initial`), round r composes each element with the one 2^r devices before it.
    """
    index = jax.lax.axis_index(axis)
    first = index == 0
    constant = lambda m, init: type(m)(jnp.where(first, 0, m.a),
                                       jax.tree.map(lambda x, i: jnp.where(first, i.astype(x.dtype), x), m.b, init))
    elements = {name: constant(m, initial[name]) for name, m in shifted(maps, 1, axis).items()}
    offset = 1
    while offset < jax.lax.axis_size(axis):
        received = shifted(elements, offset, axis)
        composed = {name: then(e, received[name]) for name, e in elements.items()}
        elements = jax.tree.map(lambda c, e: jnp.where(index >= offset, c, e), composed, elements)
        offset *= 2
    return {name: e.b for name, e in elements.items()}


class Shard(NamedTuple):
    """One device's part of a sequence split over mesh axis `axis`: which of its rows continue the document the
    previous shard ended in (`continues`, [B] bool: always on the first shard, where the initial state applies),
    and which also start no document inside (`passes`: the state entering the shard reaches its end)."""

    axis: str
    continues: jax.Array
    passes: jax.Array

    @classmethod
    def of(cls, segment_ids, batch, length, axis):
        if segment_ids is None:
            every = jnp.ones((batch,), bool)
            return cls(axis, every, every)
        ids = jnp.asarray(segment_ids)
        continues = (jax.lax.axis_index(axis) == 0) | (shifted(ids[:, -1], 1, axis) == ids[:, 0])
        return cls(axis, continues, continues & (doc_ids(ids, batch, length)[:, -1] == 0))

    def diagonal(self, a, own):
        """The shard's map with diagonal transition `a` ([B, ...], zeroed where the state does not pass) and its
        own final states `own` (from a zero start)."""
        return Diagonal(_expand(self.passes, a).astype(a.dtype) * a, own)

    def dense(self, a, own):
        """The shard's map with the dense transition `a` [B, H, K, K] and its own final state `own`."""
        return Dense(_expand(self.passes, a).astype(a.dtype) * a, own)

    def widened(self, run, k, v):
        """The shard's `Dense` map of a delta rule, whose state evolves one value column at a time under one K x K
        transition M: `run(values, start)` (the op on the shard with values v and initial state start, returning its
        final state) on v widened by K zero columns, from the state [0 | I]. A column written nothing that starts at
        e_i ends at M e_i, so the last K columns of the final state are M, the first V the shard's own state."""
        b, _, h, dk = k.shape
        dv = v.shape[-1]
        f = accum_dtype(k, v)
        values = jnp.concatenate([v, jnp.zeros((*v.shape[:3], dk), v.dtype)], axis=-1)
        start = jnp.concatenate([jnp.zeros((b, h, dk, dv), f), jnp.broadcast_to(jnp.eye(dk, dtype=f), (b, h, dk, dk))],
                                axis=-1)
        final = run(values, start)
        return self.dense(final[..., dv:], final[..., :dv])

    def counts(self, own):
        """The map of undecayed sums (the CCQ statistics): the incoming sums pass or are dropped."""
        return Diagonal(self.passes.astype(accum_dtype(*jax.tree.leaves(own))), own)

    def starts(self, maps, initial):
        """The states this shard starts from (`entering`, zeroed in rows where a document starts at its first
        token): `initial` {keyword: state or None (zeros)} enters the first shard."""
        initial = {name: _initial(name, initial.get(name), m.b) for name, m in maps.items()}
        keep = lambda x: jnp.where(_expand(self.continues, x), x, 0)
        return {name: jax.tree.map(keep, s) for name, s in entering(maps, initial, self.axis).items()}


def _initial(name, value, like):
    """The initial state `value` given for keyword `name`, checked against the shard's own final state `like`."""
    if value is None:
        return jax.tree.map(jnp.zeros_like, like)
    leaves, expected = jax.tree.leaves(value), jax.tree.leaves(like)
    if len(leaves) != len(expected) or any(jnp.shape(v) != e.shape for v, e in zip(leaves, expected)):
        want = [e.shape for e in expected]
        raise ValueError(f"{name}: expected shapes {want}, got {[jnp.shape(v) for v in leaves]}")
    return jax.tree.map(lambda v, e: jnp.asarray(v, e.dtype), value, like)


def mesh_axis(axes, length, name="q"):
    """`axes.context` when the current mesh splits sequences over it (`split_mesh(axes)`; the axis not manual, of
    more than one device), else None; a ValueError naming the input `name` when its T = `length` does not split
    evenly."""
    mesh = split_mesh(axes)
    axis = None if mesh is None else axes.context
    if axis is None or axis in mesh.manual_axes or mesh.shape[axis] == 1:
        return None
    if length % mesh.shape[axis]:
        raise ValueError(f"{name}: T = {length} does not split evenly over the mesh's {axis!r} axis of "
                         f"{mesh.shape[axis]} devices; pad the sequence to a multiple of it")
    return axis


def splits_sequence(maps):
    """Decorator of an op's public function `op(*per_token, **keywords) -> (o, final states)`: adds the keyword
    `context_axis` (see the module docstring). maps(shard, *per_token, segment_ids=..., **options) -> {state
    keyword: map of the shard} gives the op's summaries; options are the op's keywords other than its states and
    output flags (scale, impl, chunk_size, config, interpret, centered, normalize_keys, axes)."""

    def decorate(op):
        signature = inspect.signature(op)

        @functools.wraps(op)
        def run(*inputs, context_axis=None, **keywords):
            for name, x in zip(signature.parameters, inputs):
                if not hasattr(x, "shape"):  # a list would reach `.shape` (AttributeError) or, traced, __array__
                    raise ValueError(f"{name}: expected an array (jax.Array or numpy.ndarray), got "
                                     f"{type(x).__name__}")
            if context_axis is None:
                axes = keywords.get("axes")
                on_mesh = split_mesh(axes) is not None and jnp.ndim(inputs[0]) == 4  # a bad `axes` is refused here
                axis = mesh_axis(axes, inputs[0].shape[1]) if on_mesh else None
                return op(*inputs, **keywords) if axis is None else _on_mesh(run, axis, inputs, keywords)
            bound = signature.bind(*inputs, **keywords)
            bound.apply_defaults()
            keywords = {k: v for k, v in bound.arguments.items()
                        if signature.parameters[k].kind == inspect.Parameter.KEYWORD_ONLY}
            b, t = inputs[0].shape[:2]
            shard = Shard.of(keywords.get("segment_ids"), b, t, context_axis)
            options = {k: v for k, v in keywords.items() if k not in STATE_KEYWORDS and not k.startswith("output_")}
            shard_maps = maps(shard, *inputs, **options)
            return op(*inputs, **{**keywords, **shard.starts(shard_maps, keywords)})

        context = inspect.Parameter("context_axis", inspect.Parameter.KEYWORD_ONLY, default=None)
        run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), context])
        return run

    return decorate


def _on_mesh(run, axis, inputs, keywords):
    """`run` (an op with `context_axis`) under `shard_map` over every axis of the current mesh: tokens split over
    `axis`, batch rows and heads as `local` splits them (without varying-axes checks, as `local`:
    interpreted kernels could not pass them); returns the last shard's final states."""
    axes = keywords["axes"]
    mesh = split_mesh(axes)
    b, _, h = inputs[0].shape[:3]
    rows, heads = splits(mesh, axes, b, h)
    arrays = {k: keywords[k] for k in (*STATE_KEYWORDS, "segment_ids") if keywords.get(k) is not None}
    options = {k: v for k, v in keywords.items() if k not in arrays}
    specs = {k: P(rows, axis) if k == "segment_ids" else P(rows, heads) for k in arrays}

    def body(inputs, arrays):
        o, finals = run(*inputs, **arrays, **options, context_axis=axis)
        return o, jax.tree.map(lambda x: x[None], finals)

    o, finals = manual(body, mesh, ((P(rows, axis, heads),) * len(inputs), specs),
                       (P(rows, axis, heads), P(axis, rows, heads)))(inputs, arrays)
    return o, jax.tree.map(lambda x: x[-1], finals)
