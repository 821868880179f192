"""Evaluation: perplexity and extrapolation, S-NIAH, lm-eval tasks, LongBench, Delta-mu, MQAR."""
