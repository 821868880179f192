"""The name the kernels' custom VJPs give what they keep for the backward pass, for remat policies.

Each custom VJP of the kernel backends passes the arrays it keeps beyond its own inputs (the WY inverses, v_new,
intra-chunk scores, gate cumsums, CCQ statistics, final states) through `kept`, which tags them with
`jax.ad_checkpoint.checkpoint_name(..., KEPT)`. A `jax.checkpoint` policy that saves this name and the matmuls'
outputs (`ccq_jax.layers.remat`) recomputes the cheap elementwise work around a kernel in the backward pass and
never runs a forward kernel again; one that did not save it would run the kernel twice.
"""

import jax
from jax.ad_checkpoint import checkpoint_name

KEPT = "ccq_jax.ops.kept"


def kept(tree):
    """`tree` with every array tagged `KEPT` (None leaves stay None)."""
    return jax.tree.map(lambda x: checkpoint_name(x, KEPT), tree)
