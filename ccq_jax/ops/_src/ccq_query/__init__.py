"""The CCQ read: q_clean_t = q_t - lam_t * Sigma_t q_t, with Sigma_t the running covariance of the keys."""
