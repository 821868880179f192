"""GLA on the Mosaic TPU kernels: the chunked linear attention of `pallas.mosaic_tpu`, its custom VJP included."""

from ..pallas.mosaic_tpu import chunked, supports

__all__ = ["gla", "supports"]
gla = chunked
