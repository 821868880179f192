"""The lm-eval adapter against direct float64 log-probabilities of a toy recurrent LM, and its argument errors."""

import numpy as np
import pytest
from lm_eval.api.instance import Instance

from eval.lm_eval_adapter import HarnessLM
from tests.eval.toy import ByteTokenizer, ToyRecurrentLM, log_softmax_np

TOK = ByteTokenizer()


def _requests(kind, args_list):
    return [Instance(request_type=kind, doc={}, arguments=args, idx=i) for i, args in enumerate(args_list)]


def _logp_of(model, context_ids, continuation_ids):
    ids = np.asarray([context_ids + continuation_ids])
    logp = log_softmax_np(model.logits_np(ids))[0]
    n = len(context_ids)
    return sum(logp[n - 1 + j, c] for j, c in enumerate(continuation_ids))


@pytest.fixture(scope="module")
def model():
    return ToyRecurrentLM(seed=3)


def test_loglikelihood_equals_summed_logprobs(model):
    lm = HarnessLM(model.logits, model.generate, TOK, batch_size=2, max_length=64)
    pairs = [("The cat", " sat"), ("A", "bc def"), ("", "hello"), ("x ", "y")]
    out = lm.loglikelihood(_requests("loglikelihood", pairs), disable_tqdm=True)
    for (ctx, cont), (logp, is_greedy) in zip(pairs, out):
        if ctx == "":
            ref = _logp_of(model, [TOK.eos_id], TOK.encode(cont))
        else:  # trailing spaces of the context move to the continuation
            moved = len(ctx) - len(ctx.rstrip())
            ref = _logp_of(model, TOK.encode(ctx.rstrip()), TOK.encode(ctx[len(ctx) - moved :] + cont))
        assert logp == pytest.approx(ref, rel=1e-5) and not is_greedy
    # token-level: the model's own greedy continuation is greedy, a changed last token is not
    context = TOK.encode("Once upon")
    greedy = model.generate([context], 3)[0]
    other = greedy[:2] + [(greedy[2] + 1) % 256]
    scored = lm._loglikelihood_tokens([(None, context, greedy), (None, context, other)], disable_tqdm=True)
    assert [g for _, g in scored] == [True, False]
    assert scored[0][0] == pytest.approx(_logp_of(model, context, greedy), rel=1e-5)


def test_long_context_keeps_the_last_max_length_tokens(model):
    lm = HarnessLM(model.logits, None, TOK, batch_size=1, max_length=8)
    ctx, cont = "abcdefghijklmnop", "qr"
    (logp, _), = lm.loglikelihood(_requests("loglikelihood", [(ctx, cont)]), disable_tqdm=True)
    ids = TOK.encode(ctx + cont)[-9:]
    assert logp == pytest.approx(_logp_of(model, ids[:-2], ids[-2:]), rel=1e-5)


def test_loglikelihood_rolling_scores_every_token_once(model):
    max_len = 8
    lm = HarnessLM(model.logits, None, TOK, batch_size=3, max_length=max_len)
    text = "The quick brown fox jumps."  # 26 tokens: windows end at 8, 16, 24, 26
    tokens = TOK.encode(text)
    ref, end = 0.0, 0
    while end < len(tokens):
        start, end = end, min(len(tokens), end + max_len)
        for p in range(start, end):
            # the first window reads EOS + tokens[:p]; later ones the max_length tokens before their end
            context = [TOK.eos_id] + tokens[:p] if start == 0 else tokens[end - max_len - 1 : p]
            ref += _logp_of(model, context, [tokens[p]])
    (got,) = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(text,)]), disable_tqdm=True)
    assert got == pytest.approx(ref, rel=1e-5)


def test_generate_until(model):
    seen = []

    def generate(prompts, max_new_tokens):
        seen.append((prompts, max_new_tokens))
        return [TOK.encode("abc\n\nQ: more") + [TOK.eos_id] + TOK.encode("zz") for _ in prompts]

    lm = HarnessLM(model.logits, generate, TOK, batch_size=2, max_length=16, max_gen_toks=4)
    reqs = _requests(
        "generate_until",
        [("0123456789abcdefghij", {"until": ["\n\n"], "max_gen_toks": 6}), ("xy", {"until": "Q:"}), ("z", {"do_sample": False})],
    )
    assert lm.generate_until(reqs, disable_tqdm=True) == ["abc", "abc\n\n", "abc\n\nQ: more"]
    assert TOK.encode("abcdefghij") in [p for prompts, _ in seen for p in prompts]  # the last 16 - 6 tokens
    assert sorted(m for _, m in seen) == [4, 6]
    sampling = {"do_sample": True, "temperature": 0.7}
    with pytest.raises(ValueError, match=r"gen_kwargs: only greedy decoding is supported, got \{'do_sample': True, "):
        lm.generate_until(_requests("generate_until", [("a", sampling)]), disable_tqdm=True)
    for bad in (0, 16):
        with pytest.raises(ValueError, match=rf"max_gen_toks: expected 1\.\.15, got {bad}"):
            lm.generate_until(_requests("generate_until", [("a", {"max_gen_toks": bad})]), disable_tqdm=True)
    without = HarnessLM(model.logits, None, TOK, max_length=16)
    with pytest.raises(ValueError, match=r"generate_fn: this HarnessLM was built without one; generate_until needs it"):
        without.generate_until(_requests("generate_until", [("a", {})]), disable_tqdm=True)


def test_greedy_generation_through_the_toy_model(model):
    lm = HarnessLM(model.logits, model.generate, TOK, batch_size=2, max_length=32, max_gen_toks=5)
    (out,) = lm.generate_until(_requests("generate_until", [("Hello", {"until": []})]), disable_tqdm=True)
    assert out == TOK.decode(model.generate([TOK.encode("Hello")], 5)[0])


@pytest.mark.parametrize("kwargs,got", [
    (dict(batch_size=0), "0, 2048, 256"),
    (dict(max_length=1), "8, 1, 1"),
    (dict(max_length=8, max_gen_toks=8), "8, 8, 8"),
    (dict(max_gen_toks=0), "8, 2048, 0"),
])
def test_constructor_errors(model, kwargs, got):
    with pytest.raises(ValueError, match=r"batch_size, max_length, max_gen_toks: expected batch_size >= 1, max_length >= 2 "
                                         rf"and 1 <= max_gen_toks < max_length; got {got}$"):
        HarnessLM(model.logits, None, TOK, **kwargs)


def test_tokenizer_error(model):
    with pytest.raises(ValueError, match=r"tokenizer: object lacks encode, decode, eos_id, vocab_size; expected an "
                                         r"object with encode\(str\) -> list\[int\]"):
        HarnessLM(model.logits, None, object())


@pytest.mark.parametrize("continuation,length", [("", 0), ("bcdefghijk", 10)])
def test_continuation_must_fit(model, continuation, length):
    lm = HarnessLM(model.logits, None, TOK, max_length=8)
    with pytest.raises(ValueError, match=rf"continuation: expected 1\.\.8 tokens, got {length}$"):
        lm.loglikelihood(_requests("loglikelihood", [("a", continuation)]), disable_tqdm=True)


def test_harness_runs_a_local_multiple_choice_task(model, tmp_path):
    """lm_eval.simple_evaluate with a task read from a local JSONL file (no hub): acc equals a direct argmax."""
    import json

    import lm_eval
    from lm_eval.tasks import TaskManager

    docs = [
        {"q": "The sky is", "choices": [" blue", " green", " red"], "label": 0},
        {"q": "Grass is", "choices": [" red", " green"], "label": 1},
        {"q": "One two", "choices": [" three", " nine"], "label": 0},
        {"q": "Salt and", "choices": [" pepper", " sugar"], "label": 1},
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "toy_mc.yaml").write_text(
        "task: toy_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'data.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n'
    )
    lm = HarnessLM(model.logits, model.generate, TOK, batch_size=4, max_length=64)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=["toy_mc"], task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False), num_fewshot=0
    )
    # the harness joins context and choice with target_delimiter " " (choices here start with a space already)
    direct = [
        int(np.argmax([_logp_of(model, TOK.encode(d["q"]), TOK.encode(" " + c)) for c in d["choices"]])) == d["label"]
        for d in docs
    ]
    assert out["results"]["toy_mc"]["acc,none"] == pytest.approx(np.mean(direct))
