"""Regenerate tests/fixtures/h200/: a bf16 vector-matrix product x [R, 2048] @ W [2048, 2048] compiled for an H200
on a machine without one (R = 1 and 2), metadata stripped.

    JAX_PLATFORMS=cpu python scripts/make_h200_hlo_fixtures.py   # needs the gpu extra: pip install -e '.[gpu]'

At one row XLA's GPU compiler writes the whole product x * W to memory before reducing it; at two rows the product
is one GEMM (tests/benchmarks/test_inference_kernels.py reads both).
"""

import pathlib
import re
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks.tools.targets import target_device  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200"


def main() -> int:
    sharding = jax.sharding.SingleDeviceSharding(target_device("h200"))
    for rows in (1, 2):
        x, w = (jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding) for s in ((rows, 2048), (2048, 2048)))
        text = jax.jit(lambda a, b: a @ b).lower(x, w).compile().as_text()
        text = re.sub(r", metadata=\{[^}]*\}", "", text)
        text = text[:text.index("\n\nFileNames")] + text[text.index("\n\n%"):]
        (OUT / f"vector_matrix_{rows}row.hlo").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
