"""`build_pipeline(config)`: a `DataConfig` -> deterministic, per-host, resumable batches.

Synthetic tasks ("mqar", "needle") are generated on the device (`synthetic.SyntheticBatches`:
a jittable function of the step, no iterator); every other source runs on grain. The chain
(grain): source -> this host's shard (`[process_index::process_count]`, by document) ->
shuffle (global permutation, re-seeded every epoch) -> repeat -> tokenize (threads, order
kept) -> `document_example` -> pack to `seq_len` -> batch -> prefetch.

Every batch is a dict of int32 [local_batch_size, seq_len] arrays: `input_ids`, `targets`,
`segment_ids`, `positions`, `loss_mask` (see packing.py; the loss is
sum(loss_mask * nll(targets)) / sum(loss_mask)). `iter(pipeline.dataset)` gives a grain
`DatasetIterator` whose `get_state()` (a small JSON-able dict) and `set_state()` resume
exactly: after `set_state` the next batches equal those of the uninterrupted iterator. The
state is per host; store one per process (grain.checkpoint.CheckpointSave does this with orbax).
"""

from __future__ import annotations

import dataclasses
import functools

import grain

from train.data.config import SYNTHETIC_SOURCES, DataConfig
from train.data.packing import PackIterDataset, document_example, stack_rows
from train.data.shards import TokenShards
from train.data.sources import text_source
from train.data.synthetic import SyntheticBatches
from ccq_jax.tokenizers import Tokenizer, load_tokenizer, same_tokenizer


@dataclasses.dataclass(frozen=True)
class DataPipeline:
    """What the trainer needs: the batches, the vocabulary the model must cover, the local batch.

    Exactly one of `dataset` (host batches on grain) and `synthetic` (global batches made on the
    device from the step) is set. `tokenizer` is None for synthetic tasks (their ids are the
    task's own vocabulary).
    """

    dataset: grain.IterDataset | None
    synthetic: SyntheticBatches | None
    vocab_size: int
    local_batch_size: int
    seq_len: int
    tokenizer: Tokenizer | None
    process_index: int
    process_count: int


def _host(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    if process_index is None or process_count is None:
        import jax

        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index: must be in [0, process_count={process_count}), got {process_index}")
    return process_index, process_count


def _examples(config: DataConfig, tokenizer: Tokenizer) -> grain.MapDataset:
    """The source as a MapDataset (before sharding): token arrays or texts."""
    if config.source == "array_record":
        shards = TokenShards(config.paths)
        if shards.tokenizer_spec is not None and not same_tokenizer(shards.tokenizer_spec, tokenizer.spec):
            raise ValueError(
                f"tokenizer: the shards in {config.paths} were tokenised with {shards.tokenizer_spec}, "
                f"but the config's tokenizer is {tokenizer.spec}"
            )
        return grain.MapDataset.source(shards)
    return grain.MapDataset.source(text_source(config))


def build_pipeline(
    config: DataConfig, *, process_index: int | None = None, process_count: int | None = None
) -> DataPipeline:
    """Build this host's batch pipeline (process index/count default to jax.process_index/count())."""
    process_index, process_count = _host(process_index, process_count)
    if config.batch_size % process_count:
        raise ValueError(
            f"batch_size: the global batch {config.batch_size} must be divisible by process_count={process_count}"
        )
    local_batch = config.batch_size // process_count
    host = dict(local_batch_size=local_batch, seq_len=config.seq_len, process_index=process_index,
                process_count=process_count)
    if config.source in SYNTHETIC_SOURCES:
        synthetic = SyntheticBatches(config)
        return DataPipeline(dataset=None, synthetic=synthetic, vocab_size=synthetic.vocab_size, tokenizer=None, **host)
    tokenizer = load_tokenizer(config.tokenizer, bos_token=config.bos_token, eos_token=config.eos_token)

    ds = _examples(config, tokenizer)
    if len(ds) < process_count:
        raise ValueError(f"paths: the source has {len(ds)} documents, fewer than process_count={process_count}")
    ds = ds[process_index::process_count]
    if config.shuffle:
        ds = ds.shuffle(seed=config.seed)
    ds = ds.repeat(config.num_epochs)
    if config.source != "array_record":
        ds = ds.map(tokenizer.encode)
    ds = ds.map(functools.partial(document_example, bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id))
    read = grain.ReadOptions(num_threads=config.read_threads, prefetch_buffer_size=8 * config.read_threads)
    rows = PackIterDataset(ds.to_iter_dataset(read), seq_len=config.seq_len, pad_id=tokenizer.pad_id)
    batches = rows.batch(local_batch,
                         batch_fn=functools.partial(stack_rows, batch_size=local_batch, pad_id=tokenizer.pad_id))
    if config.prefetch_batches:
        batches = grain.experimental.ThreadPrefetchIterDataset(batches, prefetch_buffer_size=config.prefetch_batches)
    return DataPipeline(dataset=batches, synthetic=None, vocab_size=tokenizer.vocab_size, tokenizer=tokenizer, **host)
