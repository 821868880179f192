"""Evaluation: perplexity and extrapolation, S-NIAH, lm-eval tasks, LongBench, Delta-mu; the `ccq-eval` CLI.

The evaluation modules take plain callables (`eval.protocols`); `eval.models` adapts a
`CausalLM` to them and `eval.__main__` (`ccq-eval`) runs them on a checkpoint, a preset or
a converted fla model (`ccq_jax.checkpoints`).
"""
