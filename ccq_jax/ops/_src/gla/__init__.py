"""Gated linear attention: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale * S_t^T q_t."""
