"""How the ops run over a mesh: kernels on each device's slice (`local`), and one sequence split over the
devices of a mesh axis (`splits_sequence`, context parallelism). The mesh axis names live here once.

Kernels on each device's slice: XLA cannot partition a Pallas custom call (given sharded operands it gathers
them and runs the whole kernel on every device). So when a mesh is set (`jax.set_mesh`; the train and eval steps
trace under theirs), `local` wraps an op's kernel call in `shard_map` over the mesh axes that split the batch
(`BATCH_AXES`) and the heads (`HEAD_AXES`): the kernel's grid then covers one device's rows and heads, and only
the inputs that arrive sharded otherwise are moved. Axes that are already manual (inside a user's `shard_map`), of
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
`splits_sequence` adds this to an op's public function, and also runs it so when the current mesh has a
`context` axis (`CONTEXT_AXIS`, set by `jax.set_mesh` or the train and eval steps) of more than one device: then
the op itself shard_maps its inputs over every mesh axis (the sequence over `context`, the batch and heads as
`local` splits them) and returns the last shard's final states. docs/context_parallel.md counts the bytes
and rounds.
"""

import functools
import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ._src.xla.numerics import HIGHEST, accum_dtype, doc_ids

BATCH_AXES = ("data", "fsdp")  # mesh axes that split the batch, in this order (train.sharding's "batch" rule)
HEAD_AXES = ("tensor",)  # mesh axes that split the heads (train.sharding's "heads" rule)
STATE_KEYWORDS = ("initial_state", "initial_stats")  # an op's states, [B, H, ...]
DOCUMENT_KEYWORDS = ("docs",)  # [B, T]
CONTEXT_AXIS = "context"  # the mesh axis that splits sequences (`train.sharding.split_sequences`)


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


def local(fn):
    """`fn(*per_token_inputs, **keywords) -> (per_token_output, states...)`, run by `shard_map` on each device's
    batch rows and heads when the current mesh splits them (see the module docstring), else called as it is."""

    def run(*inputs, **keywords):
        mesh = jax.sharding.get_abstract_mesh()
        b, _, h = inputs[0].shape[:3]
        batch, heads = mesh_axes(mesh, BATCH_AXES, b), mesh_axes(mesh, HEAD_AXES, h)  # () without a mesh
        if not batch and not heads:
            return fn(*inputs, **keywords)
        rows, per_head = (batch or None), (heads or None)
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


def mesh_axis(length, name="q"):
    """CONTEXT_AXIS when the current mesh splits sequences (it has that axis, not manual, of more than one
    device), else None; a ValueError naming the input `name` when its T = `length` does not split evenly."""
    mesh = jax.sharding.get_abstract_mesh()
    if CONTEXT_AXIS not in mesh.axis_names or CONTEXT_AXIS in mesh.manual_axes or mesh.shape[CONTEXT_AXIS] == 1:
        return None
    if length % mesh.shape[CONTEXT_AXIS]:
        raise ValueError(f"{name}: T = {length} does not split evenly over the mesh's {CONTEXT_AXIS!r} axis of "
                         f"{mesh.shape[CONTEXT_AXIS]} devices; pad the sequence to a multiple of it")
    return CONTEXT_AXIS


def splits_sequence(maps):
    """Decorator of an op's public function `op(*per_token, **keywords) -> (o, final states)`: adds the keyword
    `context_axis` (see the module docstring). maps(shard, *per_token, segment_ids=..., **options) -> {state
    keyword: map of the shard} gives the op's summaries; options are the op's keywords other than its states and
    output flags (scale, impl, chunk_size, config, interpret, centered, normalize_keys)."""

    def decorate(op):
        signature = inspect.signature(op)

        @functools.wraps(op)
        def run(*inputs, context_axis=None, **keywords):
            for name, x in zip(signature.parameters, inputs):
                if not hasattr(x, "shape"):  # a list would reach `.shape` (AttributeError) or, traced, __array__
                    raise ValueError(f"{name}: expected an array (jax.Array or numpy.ndarray), got "
                                     f"{type(x).__name__}")
            if context_axis is None:
                axis = mesh_axis(inputs[0].shape[1]) if jnp.ndim(inputs[0]) == 4 else None
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
    mesh = jax.sharding.get_abstract_mesh()
    b, _, h = inputs[0].shape[:3]
    rows, heads = mesh_axes(mesh, BATCH_AXES, b) or None, mesh_axes(mesh, HEAD_AXES, h) or None
    arrays = {k: keywords[k] for k in (*STATE_KEYWORDS, "segment_ids") if keywords.get(k) is not None}
    options = {k: v for k, v in keywords.items() if k not in arrays}
    specs = {k: P(rows, axis) if k == "segment_ids" else P(rows, heads) for k in arrays}

    def body(inputs, arrays):
        o, finals = run(*inputs, **arrays, **options, context_axis=axis)
        return o, jax.tree.map(lambda x: x[None], finals)

    o, finals = manual(body, mesh, ((P(rows, axis, heads),) * len(inputs), specs),
                       (P(rows, axis, heads), P(axis, rows, heads)))(inputs, arrays)
    return o, jax.tree.map(lambda x: x[-1], finals)
