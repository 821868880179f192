"""PyTorch side of ccq-jax (the `torch` extra): the CCQ reference models and fla on a CPU.

- `models`: CCQ-GLA and CCQ-Gated DeltaNet as fla models with the CCQ read in plain PyTorch
  (model types `ccq_gla`, `ccq_gated_deltanet`; `models.register()` makes `AutoConfig` and
  `AutoModelForCausalLM` know them, and `run` calls it).
- `cpu`: `cpu_paths()`, fla's pure-PyTorch paths in place of its Triton kernels.
- `run`: random fla checkpoints and logits of a checkpoint, the two things parity needs, and one fla layer's
  parameters, input and output (layer-level parity: fla's GDN-2 has no model).
- `python ccq_jax/torch_reference {init,logits,layer} ...` runs them in a separate process (one whose
  Python has torch and fla but maybe no JAX): `ccq-parity` and `scripts/make_fla_goldens.py`
  call it that way.

Nothing here imports JAX, and nothing in the rest of ccq-jax imports this package.
"""
