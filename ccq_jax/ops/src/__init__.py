"""One package per op, each laid out the same way: `api.py` (validation, the public function, the table of
implementations `impl=` chooses from), `reference.py` (the recurrent, chunk and scan forms in XLA) and one
module per kernel backend (`pallas_triton.py`, `pallas_mosaic_gpu.py`), each owning its custom VJP. The public
functions are re-exported by `ccq_jax.ops`.
"""
