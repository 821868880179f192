"""GLA on the Mosaic TPU kernels: the chunked linear attention of `pallas.mosaic_tpu`, its custom VJP included."""

from ..pallas.layout import floored
from ..pallas.mosaic_tpu import chunked, supports

__all__ = ["gla", "supports"]


def gla(q, k, v, g, **options):
    """Chunked GLA on the Mosaic TPU kernels, its gates `floored`; see `ccq_jax.ops.gla`."""
    return chunked(q, k, v, floored(g), **options)
