"""Named training runs for `ccq-train --config NAME` (a YAML file works the same way).

`demo`: tiny GLA, CCQ-GLA, Gated DeltaNet and CCQ-Gated DeltaNet trained side by side on
synthetic MQAR (no download), sized to finish in about five minutes on a 2-core CPU.
`smoke`: one tiny GLA for a few steps (checks an install in seconds).
"""

from train.config import TrainConfig
from train.data.config import DataConfig, MQARConfig
from train.optim import OptimConfig

DEMO_MODELS = ("gla-tiny", "ccq-gla-tiny", "gdn-tiny", "ccq-gdn-tiny")


def _mqar_run(model: str, steps: int) -> TrainConfig:
    # short convolutions on every linear model (fla's GLA default leaves them off): they let one layer
    # bind a key to the value after it, so recall is learned in hundreds of steps instead of thousands
    return TrainConfig(
        name=model, model=model, model_overrides={"use_short_conv": True, "chunk_size": 32},
        data=DataConfig(source="mqar", seq_len=32, batch_size=32,
                        mqar=MQARConfig(vocab_size=64, num_kv_pairs=4, num_examples=50_000,
                                        random_non_queries=False)),
        optim=OptimConfig(lr=3e-3, warmup_steps=50, weight_decay=0.0, min_lr_ratio=0.1),
        steps=steps, log_every=25, eval_batches=8, checkpoint_every=0, keep_checkpoints=1,
    )


RUNS = {
    "demo": lambda: [_mqar_run(m, steps=300) for m in DEMO_MODELS],
    "smoke": lambda: [_mqar_run("gla-tiny", steps=20)],
}
