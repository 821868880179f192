"""What the ops' kernel backends share: the padded layout (`layout`), the one-token step kernels (`step`), GLA's
chunked linear attention under its Triton custom VJP (`triton_linear`, also the CCQ read's covariance term) and
the Mosaic TPU helpers and GLA kernel wrapper (`mosaic_tpu`)."""
