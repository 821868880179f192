"""S-NIAH: deterministic RULER-style samples that fill the length budget exactly, RULER's scoring, the heatmap,
and errors naming the bad argument."""

import dataclasses
import json
import re

import numpy as np
import pytest

from eval import niah
from eval.niah import (
    NEEDLE,
    TASKS,
    TEMPLATE,
    build_context,
    essay_words,
    generate_samples,
    plot_heatmap,
    postprocess_prediction,
    run_niah,
    singular,
    split_sentences,
    string_match_all,
    summarize,
)
from eval.plots import heatmap
from eval.records import write_json
from tests.eval.toy import ByteTokenizer

TOK = ByteTokenizer()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_samples_are_deterministic_and_independent_of_the_grid(task):
    a = generate_samples(task, TOK, lengths=[640, 1024], depths=[0, 50], num_samples=2, progress=False)
    b = generate_samples(task, TOK, lengths=[640, 1024], depths=[0, 50], num_samples=2, progress=False)
    c = generate_samples(task, TOK, lengths=[1024], depths=[50], num_samples=1, progress=False)
    assert a == b and len(a) == 8
    assert c[0] == next(s for s in a if (s.length, s.depth, s.index) == (1024, 50, 0))
    assert len({s.outputs[0] for s in a}) == 8
    d = generate_samples(task, TOK, lengths=[1024], depths=[50], num_samples=1, seed=7, progress=False)
    assert d[0].outputs != c[0].outputs


@pytest.mark.parametrize("task", sorted(TASKS))
def test_haystack_is_the_largest_that_fits(task):
    spec = TASKS[task]
    words = essay_words() if spec.haystack == "essay" else []
    for s in generate_samples(task, TOK, lengths=[640, 2000], depths=[0, 30, 100], num_samples=1, progress=False):
        assert s.num_tokens == len(TOK.encode(s.prompt)) and s.num_tokens + 128 <= s.length
        needle = NEEDLE.format(type_needle_v=spec.type_needle_v, key=s.key, value=s.outputs[0])
        type_v = spec.type_needle_v[:-1]
        bigger = singular(TEMPLATE).format(
            type_needle_v=type_v, context=build_context(spec, words, s.num_units + 1, s.depth, needle), query=s.key
        ) + s.answer_prefix
        assert len(TOK.encode(bigger)) + 128 > s.length
        assert s.prompt.count(needle) == 1


def test_prompt_text_value_and_spans():
    s1 = generate_samples("niah_single_1", TOK, lengths=[700], depths=[0], num_samples=1, progress=False)[0]
    assert s1.prompt.startswith(
        "A special magic number is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the number afterwards.\nOne of the special magic numbers for "
    )
    assert s1.prompt.endswith(
        f"There and back again.\nWhat is the special magic number for {s1.key} mentioned in the provided text?"
        f" The special magic number for {s1.key} mentioned in the provided text is"
    )
    assert re.fullmatch(r"[1-9]\d{6}", s1.outputs[0]) and re.fullmatch(r"[a-z]+-[a-z]+", s1.key)
    ids = TOK.encode(s1.prompt)
    assert TOK.decode(ids[slice(*s1.value_token_span)]) == s1.outputs[0]
    assert TOK.decode(ids[slice(*s1.needle_token_span)]).startswith("One of the special magic numbers")
    s3 = generate_samples("niah_single_3", TOK, lengths=[700], depths=[100], num_samples=1, progress=False)[0]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s3.outputs[0])
    assert f"is: {s3.outputs[0]}.\nWhat is the special magic uuid for" in s3.input


def test_essay_folder_and_errors(tmp_path):
    (tmp_path / "b.txt").write_text("Second essay here.")
    (tmp_path / "a.txt").write_text("First  essay,\n\nwith words.")
    assert essay_words(str(tmp_path)) == ["First", "essay,", "with", "words.", "Second", "essay", "here."]
    s = generate_samples("niah_single_2", TOK, lengths=[700], depths=[50], num_samples=1, essay_dir=str(tmp_path), progress=False)[0]
    assert "First essay, with words. Second essay here. First essay" in s.input and "Four score" not in s.input
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"essay_dir: .*empty holds no \.txt file"):
        generate_samples("niah_single_2", TOK, lengths=[700], essay_dir=str(tmp_path / "empty"), progress=False)
    with pytest.raises(ValueError, match=r"tokenizer: object lacks encode, decode, eos_id, vocab_size"):
        generate_samples("niah_single_1", object(), lengths=[700], progress=False)


@pytest.mark.parametrize("task,kwargs,msg", [
    ("niah_single_9", {}, r"task: expected one of \['niah_single_1', 'niah_single_2', 'niah_single_3'\], "
                          r"got 'niah_single_9'"),
    ("niah_single_1", dict(lengths=[200]), r"lengths: 200 tokens cannot hold the niah_single_1 template with a "
                                           r"one-unit haystack and 128 generated tokens; use a larger length"),
    ("niah_single_1", dict(lengths=[]), r"lengths, depths: expected at least one of each, got \[\] and \[0\]"),
    ("niah_single_1", dict(depths=[]), r"lengths, depths: expected at least one of each, got \[700\] and \[\]"),
    ("niah_single_1", dict(depths=[0, 101]), r"depths: each must be a percentage in \[0, 100\], got 101"),
    ("niah_single_1", dict(depths=[-5]), r"depths: each must be a percentage in \[0, 100\], got -5"),
    ("niah_single_1", dict(num_samples=0), r"num_samples: expected an integer >= 1, got 0"),
    ("niah_single_1", dict(tokens_to_generate=-1), r"tokens_to_generate: expected an integer >= 0, got -1"),
])
def test_generate_samples_rejects_bad_arguments(task, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        generate_samples(task, TOK, progress=False, **{"lengths": [700], "depths": [0], "num_samples": 1, **kwargs})


def test_split_sentences():
    assert split_sentences(' He said "Go." Then? Yes! (Done.) end') == ['He said "Go."', "Then?", "Yes!", "(Done.)", "end"]


def test_scoring_known_answers():
    assert string_match_all(["The number is 1234567.", "none"], [["1234567"], ["42"]]) == 50.0
    assert string_match_all(["ID: ABCDEF-12"], [["abcdef-12", "zz"]]) == 50.0
    assert postprocess_prediction("  \x00 answer\x01is\t 7 \n") == "answer\nis\n 7"
    with pytest.raises(ValueError, match=r"preds, refs: expected equally long non-empty lists, got 0 and 0"):
        string_match_all([], [])
    with pytest.raises(ValueError, match=r"preds, refs: expected equally long non-empty lists, got 2 and 1"):
        string_match_all(["a", "b"], [["a"]])


def _oracle(tokenizer, wrong=False):
    def generate(prompts, max_new_tokens):
        outs = []
        for p in prompts:
            value = re.search(r"is: (\S+)\.", tokenizer.decode(p)).group(1)
            text = " 0000000." if wrong else f" {value.upper()}. More text"
            outs.append(tokenizer.encode(text)[:max_new_tokens] + [tokenizer.eos_id, 65, 66])
        return outs

    return generate


def test_run_summarize_and_write(tmp_path):
    samples = generate_samples("niah_single_3", TOK, lengths=[700, 900], depths=[0, 100], num_samples=2, progress=False)
    good = run_niah(samples, _oracle(TOK), TOK, batch_size=3, progress=False)
    assert [r["index"] for r in good] == [s.index for s in samples]
    assert all(r["score"] == 100.0 and r["pred"].endswith("More text") for r in good)
    bad = summarize(run_niah(samples[:4], _oracle(TOK, wrong=True), TOK, progress=False) + good[4:])
    assert bad["by_length"] == {700: 0.0, 900: 100.0} and bad["overall"] == 50.0
    assert bad["by_length_depth"][900] == {0: 100.0, 100: 100.0}
    saved = json.loads(write_json(tmp_path / "niah.json", bad).read_text())
    assert saved["by_length_depth"]["900"] == {"0": 100.0, "100": 100.0}
    png = plot_heatmap(bad, tmp_path / "niah.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_heatmap_checks_the_labels_against_the_values(tmp_path):
    with pytest.raises(ValueError, match=r"values: expected shape \(3, 2\), got \(2, 3\)"):
        heatmap(np.zeros((2, 3)), tmp_path / "h.png", row_labels=[0, 50, 100], col_labels=[512, 1024], xlabel="length",
                ylabel="depth")
    assert not (tmp_path / "h.png").exists()


def test_search_gallops_both_ways():
    calls = []

    def fits(n):
        calls.append(n)
        return n <= 1000

    assert niah.largest_fitting(fits, 64) == 1000
    assert niah.largest_fitting(fits, 5000) == 1000
    assert niah.largest_fitting(fits, 1000) == 1000 and niah.largest_fitting(lambda n: False, 10) == 0



def _retrieving_logits(tokenizer):
    """A model that retrieves, as logits: after the prompt's answer prefix, +8 on each token of " " + the needle's
    value (read off the prompt), flat elsewhere."""

    def logits_fn(ids):
        ids = np.asarray(ids)
        out = np.zeros((*ids.shape, tokenizer.vocab_size), np.float32)
        for b, row in enumerate(ids):
            text = tokenizer.decode(list(row))
            found = re.search(r"is: (\S+)\.", text)
            if found is None:  # no needle in this prompt: nothing to retrieve, flat
                continue
            value = found.group(1)
            marker = " mentioned in the provided text is"
            end = len(tokenizer.encode(text[: text.index(marker) + len(marker)]))
            for j, tok in enumerate(tokenizer.encode(" " + value)):
                if end - 1 + j < len(row):
                    out[b, end - 1 + j, tok] = 8.0
        return out

    return logits_fn

def test_the_graded_score_ranks_the_true_value_first_for_a_retriever_and_at_chance_for_a_flat_model():
    samples = generate_samples("niah_single_1", TOK, lengths=[512], depths=[20, 80], num_samples=2,
                               tokens_to_generate=0, progress=False)
    copier = niah.graded_scores(samples, _retrieving_logits(TOK), TOK, progress=False)
    flat = niah.graded_scores(samples, lambda ids: np.zeros((*np.shape(ids), TOK.vocab_size), np.float32), TOK,
                              progress=False)
    assert all(r["graded_rank"] == 0 and r["graded_top1"] and r["graded_score"] == 1.0 for r in copier)
    assert all(r["graded_score"] == 0.5 and not r["graded_top1"] for r in flat)  # ties count half
    summary = niah.summarize_graded(copier)
    assert summary["graded_score"] == 1.0 and summary["by_length"][512]["graded_top1"] == 1.0
    # the negative control: without the needle the retriever has nothing to read and sits at chance
    assert all(r["control_score"] == 0.5 and not r["control_top1"] for r in copier + flat)
    assert summary["control_score"] == 0.5 and summary["by_length"][512]["control_top1"] == 0.0
    # the needle lift: +8 on each token of the true value where it differs from a candidate's, so at least 8 nats;
    # exactly 0 for the flat model (it ignores the needle)
    assert summary["needle_lift"] >= 8.0 and niah.summarize_graded(flat)["needle_lift"] == 0.0
    for sample in samples:  # the candidates: the true value first, all of its token length, distinct
        values = niah.graded_candidates(sample, TOK, niah.GRADED_CANDIDATES)
        assert values[0] == sample.outputs[0] and len(set(values)) == niah.GRADED_CANDIDATES
        assert len({len(TOK.encode(" " + v)) for v in values}) == 1


@pytest.mark.parametrize("task", ["niah_single_1", "niah_single_3"])
def test_the_needle_free_prompt_is_the_same_haystack_without_the_needle(task):
    samples = generate_samples(task, TOK, lengths=[512], depths=[0, 50, 100], num_samples=1, tokens_to_generate=0,
                               progress=False)
    spec = niah.TASKS[task]
    for sample in samples:
        needle = niah.NEEDLE.format(type_needle_v=spec.type_needle_v, key=sample.key, value=sample.outputs[0])
        free = niah.needle_free_prompt(sample)
        assert needle in sample.prompt and sample.outputs[0] not in free and sample.key in free
        assert len(free) == len(sample.prompt) - len(needle) - 1  # the needle and one separator
        words = niah.essay_words() if spec.haystack == "essay" else []
        context = niah.build_context(spec, words, sample.num_units, sample.depth, needle)
        sep = " " if spec.haystack == "essay" else "\n"
        haystack = sep.join(u for u in context.split(sep) if u != needle) if spec.haystack == "noise" else (
            context.replace(needle + " ", "") if sample.depth < 100 else context.replace(" " + needle, ""))
        assert free.replace(haystack, "<H>") == sample.prompt.replace(context, "<H>")
    with pytest.raises(ValueError, match="sample: expected its prompt to hold its needle"):
        niah.needle_free_prompt(dataclasses.replace(samples[0], outputs=["0000000"]))


def test_graded_candidates_that_cannot_be_found_are_refused_by_name():
    class OneLongAnswer(ByteTokenizer):
        """Only the true value's answer is 8 tokens long; every other value's is 9."""

        def encode(self, text):
            return super().encode(text) + ([] if "1234567" in text else [0])

    sample = generate_samples("niah_single_1", TOK, lengths=[512], depths=[50], num_samples=1,
                              tokens_to_generate=0, progress=False)[0]
    sample = dataclasses.replace(sample, outputs=["1234567"])
    with pytest.raises(ValueError, match=r"tokenizer: found no 2 values of 8 tokens like '1234567' in 3001 draws"):
        niah.graded_candidates(sample, OneLongAnswer(), 3)
