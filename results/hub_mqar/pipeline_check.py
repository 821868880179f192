import jax, jax.numpy as jnp, numpy as np, dataclasses
from study.mqar_sweep import run_config, train_members, LEARNING_RATES
from train.data.synthetic import SyntheticBatches
cfg = run_config("transformer", 64, (256, 16, 256), 2000, "chunk", 0)
data = SyntheticBatches(cfg.data)
seeds = jnp.asarray([0, 1], jnp.int32)
r = LEARNING_RATES[2]
mb = lambda step: jax.vmap(lambda s: data.batch(step, s))(seeds)
*_, last, t = train_members(cfg, [r, r], 100, seeds=[0, 1], make_batch=mb)
print("vmapped plain pipeline, seeds 0,1: final loss", np.asarray(last["loss"]), f"{t:.0f} s")
*_, last, t = train_members(cfg, [r, r], 100, seeds=[0, 1])
print("shared batches, init seeds 0,1: final loss", np.asarray(last["loss"]), f"{t:.0f} s")
