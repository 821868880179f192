"""Token-level perplexity: rolling windows with a stride, bits per byte, and streaming over a recurrent carry.

Rolling windows (the WikiText / Hugging Face "perplexity of fixed-length models" recipe): a
stream of N tokens is cut into windows of `window` tokens whose starts are `stride` apart;
each window scores only the targets the previous one did not reach, so every token 1..N-1 is
scored exactly once, with at least `window - stride` tokens of context (the first window's
tokens get what precedes them). Token 0 has no context and is never scored; pass `bos_id` to
put a BOS/EOS token in front of the stream so that every text token is scored.

Streaming (length extrapolation): each sequence goes through `step_fn` chunk by chunk with the
model's recurrent carry, so memory stays constant in the length. Because a causal model's
prediction at position t depends only on tokens <= t, one pass over sequences of length T
gives the perplexity at every evaluation length L <= T (mean NLL over the first L tokens),
exactly what separate runs on sequences truncated to L would give.
"""

import math
from dataclasses import asdict, dataclass

import numpy as np
from ccq_jax.progress import progress as progress_bar

from ccq_jax import checks as check
from eval.plots import line_plot
from eval.protocols import InitCarry, LogitsFn, StepFn
from eval.token_scores import target_logprobs


@dataclass(frozen=True)
class PerplexityResult:
    """Summed negative log-likelihood (nats) over `num_tokens` scored tokens of a text of `num_bytes` bytes."""

    nll: float
    num_tokens: int
    num_bytes: int | None = None

    @property
    def mean_nll(self) -> float:
        return self.nll / self.num_tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll)

    @property
    def bits_per_byte(self) -> float | None:
        return None if self.num_bytes is None else self.nll / (math.log(2) * self.num_bytes)

    def to_dict(self) -> dict:
        return asdict(self) | {"mean_nll": self.mean_nll, "perplexity": self.perplexity, "bits_per_byte": self.bits_per_byte}


@dataclass(frozen=True)
class Window:
    """Input tokens [begin, end) of the stream; targets [score_from, end) are scored in this window."""

    begin: int
    end: int
    score_from: int


def rolling_windows(num_tokens: int, window: int, stride: int) -> list[Window]:
    """The windows that score every target 1..num_tokens-1 exactly once (see the module docstring)."""
    if num_tokens < 2:
        raise ValueError(f"num_tokens: need at least 2 tokens to score one, got {num_tokens}")
    check.integer("window", window, minimum=2)
    if not 1 <= stride < window:
        raise ValueError(f"stride: expected 1 <= stride < window={window}, got {stride}")
    windows, scored_to = [], 1
    for begin in range(0, num_tokens, stride):
        end = min(begin + window, num_tokens)
        windows.append(Window(begin, end, scored_to))
        scored_to = end
        if end == num_tokens:
            break
    return windows


def _batches(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def windowed_perplexity(
    token_ids,
    logits_fn: LogitsFn,
    *,
    window: int,
    stride: int,
    batch_size: int = 1,
    bos_id: int | None = None,
    num_bytes: int | None = None,
    progress: bool = True,
) -> PerplexityResult:
    """Perplexity of one token stream with rolling windows (see the module docstring).

    token_ids: 1-D integer sequence. logits_fn: causal, `[B, window] int32 -> [B, window, E]`;
    every call gets exactly that shape (windows right-padded with token 0, the batch padded with
    rows of zeros), so a jitted function compiles once. num_bytes: UTF-8 bytes of the text the
    stream encodes, for bits per byte.
    """
    tokens = np.asarray(token_ids, dtype=np.int64).reshape(-1)
    if bos_id is not None:
        tokens = np.concatenate([[bos_id], tokens])
    check.integer("batch_size", batch_size, minimum=1)
    windows = rolling_windows(len(tokens), window, stride)
    nll, count = 0.0, 0
    for group in progress_bar(list(_batches(windows, batch_size)), desc="perplexity", disable=not progress):
        inputs = np.zeros((batch_size, window), np.int32)
        targets = np.zeros((batch_size, window), np.int32)
        mask = np.zeros((batch_size, window), bool)
        for row, w in enumerate(group):
            n = w.end - w.begin
            inputs[row, :n] = tokens[w.begin : w.end]
            targets[row, : n - 1] = tokens[w.begin + 1 : w.end]
            # logits at index i predict token begin + i + 1
            mask[row, w.score_from - w.begin - 1 : n - 1] = True
        logp, _ = target_logprobs(logits_fn(inputs), targets)
        nll -= float(np.sum(logp, where=mask, dtype=np.float64))
        count += int(mask.sum())
    return PerplexityResult(nll=nll, num_tokens=count, num_bytes=num_bytes)


@dataclass(frozen=True)
class PositionNLL:
    """NLL summed over sequences at each target position 1..T-1 (`nll_sum[t-1]`), and how many sequences."""

    nll_sum: np.ndarray
    num_sequences: int

    def perplexity_at(self, lengths) -> dict[int, float]:
        """{L: perplexity of the first L tokens} (targets 1..L-1) for each evaluation length L."""
        total = len(self.nll_sum) + 1
        out = {}
        for length in lengths:
            if not 2 <= length <= total:
                raise ValueError(f"lengths: each must lie in [2, {total}] (the sequence length), got {length}")
            out[int(length)] = math.exp(float(np.sum(self.nll_sum[: length - 1])) / ((length - 1) * self.num_sequences))
        return out


def streaming_nll(
    sequences,
    step_fn: StepFn,
    init_carry: InitCarry,
    *,
    chunk_size: int,
    batch_size: int = 1,
    progress: bool = True,
) -> PositionNLL:
    """Per-position NLL of `sequences [N, T]` through `step_fn` chunk by chunk (constant memory in T).

    step_fn: `(input_ids [batch_size, chunk_size] int32, carry) -> (logits [batch_size, chunk_size, E], carry)`;
    every call gets that shape (the last chunk right-padded with token 0, the last batch padded
    with rows of zeros; padding only follows real tokens, so a causal model's scores are unchanged).
    """
    seqs = np.asarray(sequences)
    if seqs.ndim != 2 or seqs.shape[0] < 1 or seqs.shape[1] < 2 or not np.issubdtype(seqs.dtype, np.integer):
        raise ValueError(f"sequences: expected integer [N, T] with N >= 1 and T >= 2, got {seqs.dtype} {seqs.shape}")
    check.integer("chunk_size", chunk_size, minimum=1)
    check.integer("batch_size", batch_size, minimum=1)
    n, length = seqs.shape
    nll_sum = np.zeros(length - 1, np.float64)
    num_chunks = -(-(length - 1) // chunk_size)  # chunks of inputs 0..T-2 (the last token is only a target)
    bar = progress_bar(total=-(-n // batch_size) * num_chunks, desc="streaming perplexity", disable=not progress)
    for first in range(0, n, batch_size):
        rows = seqs[first : first + batch_size]
        padded = np.zeros((batch_size, num_chunks * chunk_size + 1), np.int32)
        padded[: len(rows), :length] = rows
        carry = init_carry(batch_size)
        for c in range(0, length - 1, chunk_size):
            logits, carry = step_fn(padded[:, c : c + chunk_size], carry)
            logp, _ = target_logprobs(logits, padded[:, c + 1 : c + chunk_size + 1])
            stop = min(chunk_size, length - 1 - c)
            nll_sum[c : c + stop] -= np.sum(logp[: len(rows), :stop], axis=0, dtype=np.float64)
            bar.update()
    bar.close()
    return PositionNLL(nll_sum=nll_sum, num_sequences=n)


def fixed_length_sequences(token_docs, length: int, *, pack: bool = False) -> np.ndarray:
    """[N, length] int32 sequences for `streaming_nll` from tokenized documents.

    pack=False: the first `length` tokens of every document that has at least that many (long
    documents, the usual extrapolation setting); pack=True: the documents concatenated and cut
    into consecutive pieces of `length` (the remainder dropped).
    """
    check.integer("length", length, minimum=2)
    if pack:
        stream = np.concatenate([np.asarray(d, np.int32).reshape(-1) for d in token_docs] or [np.zeros(0, np.int32)])
        rows = stream[: len(stream) // length * length].reshape(-1, length)
    else:
        rows = np.asarray([d[:length] for d in token_docs if len(d) >= length], np.int32).reshape(-1, length)
    if len(rows) == 0:
        longest = max((len(d) for d in token_docs), default=0)
        raise ValueError(
            f"length: no sequence of {length} tokens can be formed (longest document: {longest} tokens"
            f"{', total after packing too short' if pack else '; pack=True concatenates documents'})"
        )
    return rows


def plot_perplexity_vs_length(curves: dict[str, dict[int, float]], path, *, title: str = "Length extrapolation"):
    """PNG of perplexity vs evaluation length, one curve per model ({model: {length: perplexity}})."""
    return line_plot(curves, path, xlabel="evaluation length (tokens)", ylabel="perplexity", title=title)
