"""Rolling-window and streaming perplexity against direct float64 computations on a toy recurrent LM."""

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


@pytest.mark.parametrize("bad,msg", [((1, 4, 1), "num_tokens"), ((10, 1, 1), "window"), ((10, 4, 4), "stride"), ((10, 4, 0), "stride")])
def test_rolling_windows_reject_bad_arguments(bad, msg):
    with pytest.raises(ValueError, match=msg):
        rolling_windows(*bad)


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
    with pytest.raises(ValueError, match="lengths"):
        pos.perplexity_at([31])


def test_fixed_length_sequences():
    docs = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    np.testing.assert_array_equal(fixed_length_sequences(docs, 4), [[4, 5, 6, 7]])
    np.testing.assert_array_equal(fixed_length_sequences(docs, 4, pack=True), [[1, 2, 3, 4], [5, 6, 7, 8]])
    with pytest.raises(ValueError, match="longest document: 5"):
        fixed_length_sequences(docs, 6)


def test_ppl_plot_is_written(tmp_path):
    path = plot_perplexity_vs_length({"gla": {1024: 20.0, 2048: 19.0}, "ccq-gla": {1024: 19.5, 2048: 18.0}}, tmp_path / "p.png")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
