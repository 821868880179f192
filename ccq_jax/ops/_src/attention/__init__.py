"""Causal softmax attention (`api.attention`): JAX's `dot_product_attention` (XLA, cuDNN) and JAX's Pallas TPU
splash attention (`pallas_mosaic_tpu`), for the attention layers of the Transformer and the hybrids."""
