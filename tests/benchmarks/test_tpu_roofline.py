"""benchmarks/probes/tpu_roofline.py: the kernels' cost estimates reach XLA's cost analysis of a compiled TPU program
(`-m tpu_aot`, the `tpu` extra; .ci/run runs it)."""

import pytest

from benchmarks.probes import tpu_roofline
from pallas_kernels import gla_tpu

pytestmark = pytest.mark.tpu_aot


def test_gla_counts_its_kernels_and_names_its_bound():
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    device = topologies.get_topology_desc(platform="tpu", topology_name=tpu_roofline.TOPOLOGIES["v5e"]).devices[0]
    row = tpu_roofline.analyse("gla", "pallas_mosaic_tpu", device, 64)
    b, t, h, dk, dv = tpu_roofline.SHAPES["gla"]
    steps = b * h * t // 64
    kernels = steps * (2 * gla_tpu.forward_cost(64, dk, dv)[0] + gla_tpu.backward_cost(64, dk, dv)[0])
    assert kernels <= row["flops"] < 1.5 * kernels  # the kernels' estimates and the XLA around them
    assert row["bytes"] > 0 and {row[f"{chip}_bound"] for chip in tpu_roofline.CHIPS} <= {"MXU", "HBM"}
