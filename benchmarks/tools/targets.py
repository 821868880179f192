"""Deviceless GPU targets: a device of XLA's GPU compiler for a GPU this machine does not have, described by a
target config (`benchmarks/h200_target.txtpb`), so that a program compiles for it ahead of time on a CPU (the `gpu`
extra, `pip install -e '.[gpu]'`, with JAX_PLATFORMS=cpu). What is fused, which kernels launch and XLA's buffer
plan are decided without the device; GEMM tiles are not autotuned."""

import dataclasses
import pathlib

TARGETS = {"h200": pathlib.Path(__file__).resolve().parents[1] / "h200_target.txtpb"}


def target_device(target: str):
    """The device to compile for: None for this machine's backend ("local"), else a deviceless GPU from `TARGETS`."""
    if target == "local":
        return None
    if target not in TARGETS:
        raise ValueError(f"target: expected 'local' or one of {sorted(TARGETS)}, got {target!r}")
    from jax.experimental import topologies

    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=TARGETS[target].read_text(),
                                                topology="1x1x1")
    except (NotImplementedError, RuntimeError) as error:
        raise ValueError(f"target: compiling for {target!r} needs JAX's CUDA plugin (pip install -e '.[gpu]') with "
                         f"JAX_PLATFORMS=cpu; got {error}") from error
    return topology.devices[0]


def compiled_for(config, device):
    """A model config whose kernels are lowered for `device` (a deviceless target: interpret=False), not run here;
    unchanged for this machine's backend (device None) or a config that runs no kernels."""
    if device is None or not config.kernel.runs_kernels:
        return config
    return dataclasses.replace(config, kernel=dataclasses.replace(config.kernel, interpret=False))
