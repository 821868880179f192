"""The gated delta rule (fla's): S = exp(g_t) S; u_t = beta_t (v_t - S^T k_t); S += k_t u_t^T; o_t = scale S^T q_t."""
