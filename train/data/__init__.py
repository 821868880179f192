"""Input pipeline on grain: sources, tokenizers (`ccq_jax.tokenizers`), packing, synthetic recall tasks, resumable batches.

    from train.data import DataConfig, build_pipeline
    pipeline = build_pipeline(DataConfig(source="text", paths=("docs/",), seq_len=128, batch_size=32))
    it = iter(pipeline.dataset)   # grain DatasetIterator: next(it), it.get_state(), it.set_state(s)
    batch = next(it)              # int32 [B_local, T]: input_ids, targets, segment_ids, positions, loss_mask
    mqar = build_pipeline(DataConfig(source="mqar", seq_len=128, batch_size=32)).synthetic
    batch = mqar.batch(step)      # the same keys, [B, T], made on the device (jittable) from the step

Modules: config (DataConfig + task configs, built with `ccq_jax.configlib`), sources (text/jsonl/parquet/HF, read by `ccq_jax.documents`),
shards (ArrayRecord format), synthetic (MQAR, needle), packing, pipeline, recall (accuracy),
prepare (the ccq-prepare-data CLI).
"""

from train.data.config import DataConfig, MQARConfig, NeedleConfig
from train.data.pipeline import DataPipeline, build_pipeline
from train.data.recall import recall_accuracy, recall_counts
from ccq_jax.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer, round_vocab_size

__all__ = [
    "ByteTokenizer",
    "DataConfig",
    "DataPipeline",
    "HFTokenizer",
    "MQARConfig",
    "NeedleConfig",
    "Tokenizer",
    "build_pipeline",
    "load_tokenizer",
    "recall_accuracy",
    "recall_counts",
    "round_vocab_size",
]
