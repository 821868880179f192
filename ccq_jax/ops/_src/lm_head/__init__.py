"""The LM head's logits of a few rows (a decode step's), on XLA's GEMM or the row-matmul kernel."""
