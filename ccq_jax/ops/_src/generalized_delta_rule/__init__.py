"""The generalized delta rule: S_t = (I - k_t a_t^T) Diag(exp g_t) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t."""
