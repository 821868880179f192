"""Device mesh and logical-axis sharding: one rules table maps named axes to the mesh axes.

The mesh axis names live here, and only here: `data`, `fsdp`, `context` and `tensor` (`MESH_AXES`; sizes from
config, one of them may be -1 to take the remaining devices). Parameters carry logical axis names (`embed`,
`heads`, `kv`, `mlp`, `vocab`, ...) as NNX sharding metadata; `RULES` maps each to a mesh axis. Batches are
split by rows over `data` and `fsdp`; with `context` > 1 each row's tokens are split over `context` too
(`split_sequences`). The ops are told the same axes as a value, `OPS_AXES` (`ops_axes(RULES)`: the batch rule's
axes split the batch, the heads rule's the heads, `context` the sequence), which `with_ops_axes` puts on the
model config the train and eval steps build (`train.step.build_train_call`); every op, short convolution and
softmax attention layer then runs on its device's rows, heads and part of the sequence (`ccq_jax.ops.sharding`;
attention all-gathers the keys and values, `ccq_jax.layers.attention`). The same code runs on one
CPU, 8 fake CPU devices, one or two GPUs, and a TPU slice.
"""

import dataclasses
import math
import os

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from ccq_jax import configlib
from ccq_jax.ops import OpsAxes

CONTEXT_AXIS = "context"  # the mesh axis that splits sequences (`split_sequences`)
MESH_AXES = ("data", "fsdp", CONTEXT_AXIS, "tensor")
BATCH_AXES = ("data", "fsdp")  # the mesh axes that split the batch, in this order
SEQUENCE_KEYS = ("input_ids", "targets", "segment_ids", "positions", "loss_mask")  # a batch's [B, T] arrays

# logical axis -> mesh axis (or None: replicated). The one place sharding policy lives; the ops split batch and
# heads over the same axes (`OPS_AXES`).
RULES = (
    ("batch", BATCH_AXES),
    ("embed", ("fsdp", CONTEXT_AXIS)),  # parameters also split over the devices that split sequences (MaxText)
    ("vocab", "tensor"),
    ("heads", ("tensor",)),
    ("mlp", "tensor"),
    ("kv", None),
    ("conv", None),
    ("norm", None),
    ("layers", None),
)


def ops_axes(rules=RULES) -> OpsAxes:
    """The mesh axes the ops split over under `rules`: the batch rule's split the batch, the heads rule's the
    heads (and the short convolutions' channels), `CONTEXT_AXIS` the sequence."""
    table = dict(rules)
    names = lambda rule: (table[rule],) if isinstance(table[rule], str) else tuple(table[rule] or ())
    return OpsAxes(batch=names("batch"), heads=names("heads"), context=CONTEXT_AXIS)


OPS_AXES = ops_axes()


def with_ops_axes(model_cfg, axes: OpsAxes = OPS_AXES):
    """The model config `model_cfg` with its kernel policy splitting over `axes` (`KernelPolicy.axes`): the model
    the train and eval steps build, whose ops then split the step's mesh as its parameters and batches are."""
    return dataclasses.replace(model_cfg, kernel=dataclasses.replace(model_cfg.kernel, axes=axes))


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    data: int = -1
    fsdp: int = 1
    context: int = 1  # devices one sequence is split over (context parallelism)
    tensor: int = 1

    def __post_init__(self):
        configlib.check_field_types(self, "mesh.")
        sizes = dataclasses.astuple(self)
        if any(s == 0 or s < -1 for s in sizes):
            raise ValueError(f"mesh: axis sizes must be positive or -1, got {dict(zip(MESH_AXES, sizes))}")
        if sizes.count(-1) > 1:
            raise ValueError("mesh: at most one axis may be -1 (it takes the remaining devices)")

    def shape(self, num_devices: int) -> tuple[int, ...]:
        sizes = list(dataclasses.astuple(self))
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ValueError(f"mesh: {num_devices} devices do not split into {dict(zip(MESH_AXES, sizes))}")
            sizes[sizes.index(-1)] = num_devices // known
        if math.prod(sizes) != num_devices:
            raise ValueError(f"mesh: {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, "
                             f"but {num_devices} are available")
        return tuple(sizes)


def make_mesh(cfg: MeshConfig, devices=None) -> jax.sharding.Mesh:
    devices = list(devices if devices is not None else jax.devices())
    shape = cfg.shape(len(devices))
    return jax.make_mesh(shape, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def initialize_distributed():
    """Join a multi-process job when the environment describes one (JAX_COORDINATOR_ADDRESS etc.)."""
    if "JAX_COORDINATOR_ADDRESS" in os.environ and not jax.distributed.is_initialized():
        jax.distributed.initialize(
            coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )


def _fit(spec: PartitionSpec, shape, mesh) -> PartitionSpec:
    """Drop mesh axes from dimensions they do not divide (a tiny vocab on 8 devices stays replicated)."""
    fitted = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        names = (axes,) if isinstance(axes, str) else tuple(axes or ())
        size = math.prod(mesh.shape[n] for n in names)
        fitted.append(axes if names and dim % size == 0 else None)
    return PartitionSpec(*fitted)


def state_shardings(abstract_state, mesh, rules=RULES):
    """NamedSharding for every variable of an (abstract) NNX state, from its logical axis names."""
    with nnx.logical_axis_rules(rules):
        specs = nnx.get_partition_spec(abstract_state)
    is_spec = lambda x: isinstance(x, PartitionSpec)
    return jax.tree.map(lambda spec, x: NamedSharding(mesh, _fit(spec, x.shape, mesh)), specs, abstract_state,
                        is_leaf=is_spec)


def batch_sharding(mesh, *, stacked: bool = False) -> NamedSharding:
    """[B, T] batches split over data and fsdp; with `stacked`, [S, B, T] stacks of S such batches."""
    return NamedSharding(mesh, PartitionSpec(None, BATCH_AXES) if stacked else PartitionSpec(BATCH_AXES))


def sequence_runs() -> int:
    """How many devices the current mesh splits each sequence over (its `context` axis; 1 without one)."""
    mesh = jax.sharding.get_abstract_mesh()
    return mesh.shape[CONTEXT_AXIS] if CONTEXT_AXIS in mesh.axis_names else 1


def split_sequences(batch: dict) -> dict:
    """The batch with its [B, T] arrays (`SEQUENCE_KEYS`) split over the current mesh's `context` axis as well as
    by rows; as it is when there is no such axis. Batches arrive split by rows only (each device of a context
    group receives its rows whole: a few bytes a token), so this slices each device's tokens out where it is, and
    the model's activations follow the tokens' layout."""
    if sequence_runs() == 1:
        return batch
    spec = PartitionSpec(BATCH_AXES, CONTEXT_AXIS)
    return {k: jax.lax.with_sharding_constraint(v, spec) if k in SEQUENCE_KEYS else v for k, v in batch.items()}


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def host_batch_to_global(batch: dict, mesh, *, stacked: bool = False) -> dict:
    """Each host's slice of the batch (or of a stack of batches) as global arrays sharded over the batch axes."""
    sharding = batch_sharding(mesh, stacked=stacked)
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in batch.items()}
