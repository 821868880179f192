"""Kernels run on each device's slice: under a mesh, a kernel call is wrapped in `jax.shard_map`.

XLA cannot partition a Pallas custom call: given sharded operands it gathers them and runs the whole kernel on
every device. So when a mesh is set (`jax.set_mesh`; the train and eval steps trace under theirs), `local` wraps an op's kernel call in
`shard_map` over the mesh axes that split the batch (`BATCH_AXES`) and the heads (`HEAD_AXES`): the kernel's grid
then covers one device's rows and heads, and only the inputs that arrive sharded otherwise are moved. Axes that are
already manual (inside a user's `shard_map`), of size 1, or that do not divide the dimension split nothing; the
shard_map is still manual over every mesh axis (Mosaic TPU kernels refuse to be partitioned over any auto axis),
so an axis that splits nothing sees the same blocks on each of its devices. The reference forms need none of
this: XLA partitions them. The wrapper runs with `check_vma=False`: a `pallas_call`'s outputs carry no
varying-axes type (compiled, its `out_shape`s would each need a `manual_axis_type`; interpreted, its dynamic
slices are bound without varying-axis casts), while the in/out specs already say how every block varies: split
over the batch and head axes, the same on the devices of any other axis.

The layouts the ops share: positional inputs and the first output are per token, `[B, T, H, ...]`; states and
statistics are `[B, H, ...]`; the document index is `[B, T]`.
"""

import jax
from jax.sharding import PartitionSpec as P

BATCH_AXES = ("data", "fsdp")  # mesh axes that split the batch, in this order (train.sharding's "batch" rule)
HEAD_AXES = ("tensor",)  # mesh axes that split the heads (train.sharding's "heads" rule)
STATE_KEYWORDS = ("initial_state", "initial_stats")  # [B, H, ...]
DOCUMENT_KEYWORDS = ("docs",)  # [B, T]


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
