"""Rolling-window and streaming perplexity against direct float64 computations on a toy recurrent LM;
bad arguments and model outputs that do not fit the tokens raise errors naming the argument."""

import math

import numpy as np
import pytest

from eval.perplexity import (
    PerplexityResult,
    fixed_length_sequences,
    plot_perplexity_vs_length,
    rolling_windows,
    streaming_nll,
    windowed_perplexity,
)
from tests.eval.toy import ToyRecurrentLM, log_softmax_np


@pytest.mark.parametrize("n,window,stride", [(2, 2, 1), (10, 4, 1), (37, 8, 3), (37, 8, 7), (64, 16, 16 - 1), (5, 32, 8)])
def test_rolling_windows_score_each_token_once_with_enough_context(n, window, stride):
    windows = rolling_windows(n, window, stride)
    scored = [p for w in windows for p in range(w.score_from, w.end)]
    assert scored == list(range(1, n))
    for i, w in enumerate(windows):
        assert w.end - w.begin <= window and w.begin < w.score_from
        if i > 0:  # later windows give every scored token at least window - stride tokens of context
            assert w.score_from - w.begin >= min(window - stride, w.score_from)


@pytest.mark.parametrize("bad,msg", [
    ((1, 4, 1), r"num_tokens: need at least 2 tokens to score one, got 1"),
    ((10, 1, 1), r"window: expected an integer >= 2, got 1"),
    ((10, 4.0, 1), r"window: expected an integer, got 4\.0"),
    ((10, 4, 4), r"stride: expected 1 <= stride < window=4, got 4"),
    ((10, 4, 0), r"stride: expected 1 <= stride < window=4, got 0"),
])
def test_rolling_windows_reject_bad_arguments(bad, msg):
    with pytest.raises(ValueError, match=msg):
        rolling_windows(*bad)


def _zeros(vocab, drop=0):
    """A LogitsFn returning zero logits over `vocab` ids, `drop` positions short."""
    return lambda ids: np.zeros((ids.shape[0], ids.shape[1] - drop, vocab), np.float32)


@pytest.mark.parametrize("logits_fn,kwargs,msg", [
    (_zeros(257), dict(batch_size=0), r"batch_size: expected an integer >= 1, got 0"),
    (_zeros(257, drop=1), {}, r"logits: expected \[B, T, E\] matching targets \[B, T\]; got logits \(1, 3, 257\), "
                              r"targets \(1, 4\)"),
    # a model whose vocabulary is smaller than the tokenizer's: an error, not a NaN perplexity
    (_zeros(100), {}, r"targets: expected token ids in \[0, 100\) \(E, the logits' last dimension\), got ids from "
                      r"0 to 200"),
])
def test_windowed_perplexity_rejects_bad_arguments_and_logits(logits_fn, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        windowed_perplexity([5, 200, 7], logits_fn, window=4, stride=2, progress=False, **{"batch_size": 1, **kwargs})


@pytest.mark.parametrize("seqs,kwargs,msg", [
    (np.zeros(8, np.int32), {}, r"sequences: expected integer \[N, T\] with N >= 1 and T >= 2, got int32 \(8,\)"),
    (np.zeros((2, 8)), {}, r"sequences: expected integer \[N, T\] .*, got float64 \(2, 8\)"),
    (np.zeros((2, 1), np.int32), {}, r"sequences: expected integer \[N, T\] .*, got int32 \(2, 1\)"),
    (np.zeros((0, 8), np.int32), {}, r"sequences: expected integer \[N, T\] .*, got int32 \(0, 8\)"),
    (np.zeros((2, 8), np.int32), dict(chunk_size=0), r"chunk_size: expected an integer >= 1, got 0"),
    (np.zeros((2, 8), np.int32), dict(batch_size=0), r"batch_size: expected an integer >= 1, got 0"),
])
def test_streaming_rejects_bad_arguments(seqs, kwargs, msg):
    model = ToyRecurrentLM()
    with pytest.raises(ValueError, match=msg):
        streaming_nll(seqs, model.step, model.init_carry, progress=False, **{"chunk_size": 4, **kwargs})


def _direct_nll(model, tokens, window, stride):
    """Each target scored from the start of the window that owns it, one float64 forward per token."""
    nll = 0.0
    for w in rolling_windows(len(tokens), window, stride):
        for p in range(w.score_from, w.end):
            logp = log_softmax_np(model.logits_np(np.asarray([tokens[w.begin : p]]))[0, -1])
            nll -= logp[tokens[p]]
    return nll


@pytest.mark.parametrize("window,stride,batch", [(8, 3, 1), (8, 5, 3), (16, 1, 4)])
def test_windowed_perplexity_equals_direct_computation(window, stride, batch):
    model = ToyRecurrentLM()
    tokens = np.random.default_rng(1).integers(0, 256, size=41)
    res = windowed_perplexity(tokens, model.logits, window=window, stride=stride, batch_size=batch, num_bytes=41, progress=False)
    ref = _direct_nll(model, tokens, window, stride)
    assert res.num_tokens == 40
    np.testing.assert_allclose(res.nll, ref, rtol=2e-5)
    assert res.perplexity == pytest.approx(math.exp(ref / 40), rel=2e-5)
    assert res.bits_per_byte == pytest.approx(ref / math.log(2) / 41, rel=2e-5)


def test_bos_id_scores_every_text_token():
    model = ToyRecurrentLM()
    tokens = [5, 9, 200, 7, 7]
    res = windowed_perplexity(tokens, model.logits, window=4, stride=2, bos_id=256, progress=False)
    assert res.num_tokens == len(tokens)
    np.testing.assert_allclose(res.nll, _direct_nll(model, [256, *tokens], 4, 2), rtol=2e-5)


def test_result_serialises_and_handles_missing_bytes():
    d = PerplexityResult(nll=2.0, num_tokens=2).to_dict()
    assert d["perplexity"] == pytest.approx(math.e) and d["bits_per_byte"] is None


@pytest.mark.parametrize("chunk,batch", [(4, 1), (7, 2), (64, 3)])
def test_streaming_equals_full_forward(chunk, batch):
    model = ToyRecurrentLM()
    seqs = np.random.default_rng(2).integers(0, 256, size=(3, 30))
    pos = streaming_nll(seqs, model.step, model.init_carry, chunk_size=chunk, batch_size=batch, progress=False)
    logp = log_softmax_np(model.logits_np(seqs))
    ref = -np.take_along_axis(logp[:, :-1], seqs[:, 1:, None], axis=-1)[..., 0].sum(axis=0)
    np.testing.assert_allclose(pos.nll_sum, ref, rtol=2e-5)
    ppl = pos.perplexity_at([2, 10, 30])
    for length, value in ppl.items():
        assert value == pytest.approx(math.exp(ref[: length - 1].sum() / (3 * (length - 1))), rel=2e-5)
    # the prefix perplexity at L equals a windowed run on sequences cut to L with the window covering them
    cut = windowed_perplexity(seqs[0, :10], model.logits, window=10, stride=5, progress=False)
    one = streaming_nll(seqs[:1], model.step, model.init_carry, chunk_size=chunk, progress=False)
    assert one.perplexity_at([10])[10] == pytest.approx(cut.perplexity, rel=2e-5)
    for bad in (1, 31):
        with pytest.raises(ValueError, match=rf"lengths: each must lie in \[2, 30\] \(the sequence length\), got {bad}$"):
            pos.perplexity_at([bad])


def test_fixed_length_sequences():
    docs = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    np.testing.assert_array_equal(fixed_length_sequences(docs, 4), [[4, 5, 6, 7]])
    np.testing.assert_array_equal(fixed_length_sequences(docs, 4, pack=True), [[1, 2, 3, 4], [5, 6, 7, 8]])
    with pytest.raises(ValueError, match=r"length: no sequence of 6 tokens can be formed \(longest document: 5 tokens; "
                                         r"pack=True concatenates documents\)"):
        fixed_length_sequences(docs, 6)
    with pytest.raises(ValueError, match=r"length: no sequence of 10 tokens .*total after packing too short"):
        fixed_length_sequences(docs, 10, pack=True)
    with pytest.raises(ValueError, match=r"length: expected an integer >= 2, got 1"):
        fixed_length_sequences(docs, 1)


def test_ppl_plot_is_written(tmp_path):
    path = plot_perplexity_vs_length({"gla": {1024: 20.0, 2048: 19.0}, "ccq-gla": {1024: 19.5, 2048: 18.0}}, tmp_path / "p.png")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
