"""RULER-compatible single-needle NIAH (S-NIAH): seeded samples on a length x depth grid, greedy runs, scores.

Follows NVIDIA RULER (`scripts/data/synthetic/niah.py`, `constants.py`, `synthetic.yaml`) and
lm-eval's port (`lm_eval/tasks/ruler`):

- `niah_single_1`: the "noise" haystack (one sentence repeated, lines joined by newlines), key
  a word, value a 7-digit number (pass-key retrieval; S-NIAH-1 of the GDN/CCQ papers);
- `niah_single_2`: an essay haystack, value a 7-digit number (S-NIAH-2);
- `niah_single_3`: an essay haystack, value a UUID (S-NIAH-3);
- RULER's needle "One of the special magic {type} for {key} is: {value}.", its template and
  answer prefix in their singular form (one needle, one query), the prompt being template +
  answer prefix, `tokens_to_generate` = 128, and `string_match_all` scoring (case-insensitive
  substring, mean fraction of answers found, x 100) after RULER's post-processing.

Where this differs from RULER, on purpose, so that it runs offline and is reproducible:
- the needle sits at a fixed depth per grid cell (RULER draws one of 40 depths per sample; use
  `RULER_DEPTHS` as the depth list to cover the same ones), at a sentence boundary
  `int(n_sentences * depth / 100)` in both haystacks (RULER places the noise needle at a random line);
- the haystack size is the largest number of units (essay words / noise sentences) whose prompt
  fits `len(encode(prompt)) + tokens_to_generate <= length`, found exactly per sample
  (RULER: a search once per length, then steps of 500 words / 25 sentences back);
- sentences are split by a regular expression (RULER: NLTK punkt, which needs a download);
- the essays come from a local folder of .txt files (e.g. Paul Graham's essays, as in RULER)
  or, by default, the built-in public-domain text of `eval.builtin_text`; keys are drawn from
  that module's word lists;
- every sample has its own `random.Random` seeded by (seed, task, length, depth, index), so a
  sample does not change when the grid around it does.
"""

import random
import re
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from ccq_jax.progress import progress as progress_bar

from ccq_jax import checks as check
from eval.builtin_text import ADJECTIVES, ESSAY, NOUNS
from eval.plots import heatmap
from eval.protocols import GenerateFn, LogitsFn, Tokenizer, check_tokenizer, cut_at_eos
from eval.token_scores import target_logprobs

TEMPLATE = (
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\n"
    "What are all the special magic {type_needle_v} for {query} mentioned in the provided text?"
)
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
TOKENS_TO_GENERATE = 128
RULER_DEPTHS = tuple(int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)))
DEFAULT_DEPTHS = tuple(range(0, 101, 10))
KEYS = sorted(f"{a}-{n}" for a in ADJECTIVES for n in NOUNS)


@dataclass(frozen=True)
class NiahTask:
    haystack: str  # "noise" | "essay"
    type_needle_v: str  # "numbers" | "uuids"

    @property
    def separator(self) -> str:
        """What joins the haystack's units (essay sentences, noise lines) and the needle between them."""
        return " " if self.haystack == "essay" else "\n"

    @property
    def singular_type(self) -> str:
        """The template's singular of `type_needle_v` (one needle, one query): "number" | "uuid"."""
        return self.type_needle_v[:-1]

    def needle(self, key: str, value: str) -> str:
        """The needle sentence, in RULER's plural wording."""
        return NEEDLE.format(type_needle_v=self.type_needle_v, key=key, value=value)

    @property
    def header(self) -> str:
        """The singular template's text before the haystack."""
        return SINGULAR_HEADER.format(type_needle_v=self.singular_type)

    def question(self, key: str) -> str:
        """The singular template's text after the haystack, then the answer prefix: what a prompt ends with."""
        return SINGULAR_QUESTION.format(type_needle_v=self.singular_type, query=key) + self.answer_prefix(key)

    def answer_prefix(self, key: str) -> str:
        """What the model's answer continues (the prompt's last words)."""
        return singular(ANSWER_PREFIX).format(type_needle_v=self.singular_type, query=key)


TASKS = {
    "niah_single_1": NiahTask("noise", "numbers"),
    "niah_single_2": NiahTask("essay", "numbers"),
    "niah_single_3": NiahTask("essay", "uuids"),
}


@dataclass(frozen=True)
class NiahSample:
    """One prompt: `input + answer_prefix` is what the model continues; `outputs` are the answers.

    `value_token_span` / `needle_token_span`: [start, end) token positions of the needle's value and
    of the whole needle sentence in `encode(input + answer_prefix)`, measured as
    `len(encode(prefix_text))` (exact for byte-level tokenizers; for BPE a merge across the
    boundary can shift them by one). `num_tokens` = `len(encode(input + answer_prefix))`.
    """

    task: str
    length: int
    depth: int
    index: int
    input: str
    answer_prefix: str
    outputs: list[str]
    key: str
    num_units: int
    num_tokens: int
    value_token_span: tuple[int, int]
    needle_token_span: tuple[int, int]

    @property
    def prompt(self) -> str:
        return self.input + self.answer_prefix


def singular(text: str) -> str:
    """RULER's rewrite of the template for one needle and one query."""
    return text.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")


SINGULAR_HEADER, SINGULAR_QUESTION = singular(TEMPLATE).split("{context}")  # around the haystack


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def split_sentences(text: str) -> list[str]:
    """Sentences: breaks after . ! ? (optionally followed by a closing quote or bracket) and whitespace."""
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def essay_words(essay_dir: str | None = None) -> list[str]:
    """The essay haystack as words (RULER: all essays joined, whitespace collapsed, split on spaces).

    essay_dir: a folder of .txt essays read in sorted order; None for the built-in public-domain text.
    """
    if essay_dir is None:
        text = ESSAY
    else:
        files = sorted(Path(essay_dir).glob("*.txt"))
        if not files:
            raise ValueError(f"essay_dir: {essay_dir} holds no .txt file")
        text = " ".join(f.read_text(encoding="utf-8") for f in files)
    return re.sub(r"\s+", " ", text).strip().split(" ")


def haystack_units(task: NiahTask, words: list[str], num_units: int) -> list[str]:
    """The haystack of `num_units` units (essay words, repeated as needed, as sentences / noise sentences), to be
    joined by `task.separator`."""
    if task.haystack == "essay":
        return split_sentences(" ".join((words * -(-num_units // len(words)))[:num_units]))
    return [NOISE] * num_units


def build_context(task: NiahTask, words: list[str], num_units: int, depth: int, needle: str) -> str:
    """The haystack of `num_units` units (essay words / noise sentences) with the needle at `depth` percent."""
    sents = haystack_units(task, words, num_units)
    at = int(len(sents) * depth / 100)
    return task.separator.join([*sents[:at], needle, *sents[at:]])


def needle_value(task: NiahTask, rng: random.Random) -> str:
    """A needle's value of the task's kind drawn by `rng`: a 7-digit number or a UUID."""
    if task.type_needle_v == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


UNITS_GUESS = 64  # haystack units a prompt's search tries first, before it knows a neighbour's answer


def largest_fitting(fits, start: int = UNITS_GUESS) -> int:
    """The largest n >= 1 with fits(n), for fits monotone (true up to some n, false beyond); 0 if none.

    Gallops from `start` (the previous sample's answer) by doubling steps, then bisects.
    """
    if not fits(1):
        return 0
    step = 1
    if fits(start):
        lo = start
        while fits(lo + step):
            lo, step = lo + step, step * 2
        hi = lo + step
    else:
        hi = start
        while hi - step > 1 and not fits(hi - step):
            hi, step = hi - step, step * 2
        lo = max(1, hi - step)
    while hi - lo > 1:  # fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _span(tokenizer: Tokenizer, text: str, start: int, end: int) -> tuple[int, int]:
    return len(tokenizer.encode(text[:start])), len(tokenizer.encode(text[:end]))


def generate_samples(
    task: str,
    tokenizer: Tokenizer,
    *,
    lengths,
    depths=DEFAULT_DEPTHS,
    num_samples: int = 10,
    seed: int = 42,
    tokens_to_generate: int = TOKENS_TO_GENERATE,
    essay_dir: str | None = None,
    progress: bool = True,
) -> list[NiahSample]:
    """`num_samples` prompts for every (length, depth) cell, each as long as fits in `length` tokens."""
    if task not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    check_tokenizer(tokenizer)
    if not len(lengths) or not len(depths):
        raise ValueError(f"lengths, depths: expected at least one of each, got {list(lengths)} and {list(depths)}")
    for d in depths:
        if not 0 <= d <= 100:
            raise ValueError(f"depths: each must be a percentage in [0, 100], got {d}")
    check.integer("num_samples", num_samples, minimum=1)
    check.integer("tokens_to_generate", tokens_to_generate, minimum=0)
    spec = TASKS[task]
    words = essay_words(essay_dir) if spec.haystack == "essay" else []
    samples, start = [], {}
    cells = [(length, depth, i) for length in lengths for depth in depths for i in range(num_samples)]
    for length, depth, index in progress_bar(cells, desc=f"{task} samples", disable=not progress):
        rng = random.Random(f"{seed}:{task}:{length}:{depth}:{index}")
        key, value = rng.choice(KEYS), needle_value(spec, rng)
        needle, prefix = spec.needle(key, value), spec.answer_prefix(key)

        def prompt(n: int) -> str:
            return spec.header + build_context(spec, words, n, depth, needle) + spec.question(key)

        def fits(n: int) -> bool:
            return len(tokenizer.encode(prompt(n))) + tokens_to_generate <= length

        n = largest_fitting(fits, start.get(length, UNITS_GUESS))
        if n == 0:
            raise ValueError(
                f"lengths: {length} tokens cannot hold the {task} template with a one-unit haystack and "
                f"{tokens_to_generate} generated tokens; use a larger length"
            )
        start[length] = n
        text = prompt(n)
        at = text.index(needle)
        value_at = at + needle.index(value)
        samples.append(
            NiahSample(
                task=task, length=int(length), depth=int(depth), index=index, input=text[: len(text) - len(prefix)],
                answer_prefix=prefix, outputs=[value], key=key, num_units=n, num_tokens=len(tokenizer.encode(text)),
                value_token_span=_span(tokenizer, text, value_at, value_at + len(value)),
                needle_token_span=_span(tokenizer, text, at, at + len(needle)),
            )
        )
    return samples


def postprocess_prediction(text: str) -> str:
    """RULER's clean-up: strip, turn control characters into newlines, strip again."""
    return re.sub(r"[\x00-\x1f]", "\n", text.strip()).strip()


def string_match_all(preds: list[str], refs: list[list[str]]) -> float:
    """RULER's metric: mean over samples of the fraction of references found (case-insensitive substring), x 100."""
    if len(preds) != len(refs) or not preds:
        raise ValueError(f"preds, refs: expected equally long non-empty lists, got {len(preds)} and {len(refs)}")
    hits = [sum(r.lower() in p.lower() for r in ref) / len(ref) for p, ref in zip(preds, refs)]
    return 100.0 * sum(hits) / len(hits)


def run_niah(
    samples: list[NiahSample],
    generate_fn: GenerateFn,
    tokenizer: Tokenizer,
    *,
    max_new_tokens: int = TOKENS_TO_GENERATE,
    batch_size: int = 1,
    progress: bool = True,
) -> list[dict]:
    """Greedy continuations of every sample's prompt, scored; one record per sample (sample fields + pred + score)."""
    check_tokenizer(tokenizer)
    order = sorted(range(len(samples)), key=lambda i: samples[i].num_tokens)
    records: list[dict | None] = [None] * len(samples)
    for first in progress_bar(range(0, len(order), batch_size), desc="niah generate", disable=not progress):
        idx = order[first : first + batch_size]
        outs = generate_fn([tokenizer.encode(samples[i].prompt) for i in idx], max_new_tokens)
        for i, out in zip(idx, outs):
            pred = postprocess_prediction(tokenizer.decode(cut_at_eos(list(out), tokenizer.eos_id)))
            records[i] = asdict(samples[i]) | {"pred": pred, "score": string_match_all([pred], [samples[i].outputs])}
    return records


GRADED_CANDIDATES = 10


def graded_candidates(sample: NiahSample, tokenizer: Tokenizer, count: int) -> list[str]:
    """The true value first, then count - 1 other values of the task's kind whose answer (" " + value) has as many
    tokens as the true one's, drawn by a generator seeded by the sample."""
    spec, true = TASKS[sample.task], sample.outputs[0]
    rng = random.Random(f"graded:{sample.task}:{sample.length}:{sample.depth}:{sample.index}")
    width = len(tokenizer.encode(" " + true))
    out, tries = [true], 0
    while len(out) < count:
        tries += 1
        if tries > 1000 * count:
            raise ValueError(f"tokenizer: found no {count - 1} values of {width} tokens like {true!r} in {tries} draws")
        value = needle_value(spec, rng)
        if value not in out and len(tokenizer.encode(" " + value)) == width:
            out.append(value)
    return out


def needle_free_prompt(sample: NiahSample) -> str:
    """The sample's prompt with its needle sentence and one separator next to it removed: the same haystack, key
    query and answer prefix, with nothing to retrieve (the graded score's negative control)."""
    spec = TASKS[sample.task]
    needle = spec.needle(sample.key, sample.outputs[0])
    text = sample.prompt
    at = text.find(needle)
    if at < 0:
        raise ValueError(f"sample: expected its prompt to hold its needle {needle!r}")
    end = at + len(needle)
    if text[end : end + 1] == spec.separator:
        end += 1
    elif text[at - 1 : at] == spec.separator:  # the needle ends the haystack
        at -= 1
    return text[:at] + text[end:]


def _rank(prompt: list[int], answers: list[list[int]], logits_fn: LogitsFn) -> tuple[np.ndarray, float]:
    """Each answer's teacher-forced log-probability after `prompt`, and the fraction of the others the first beats
    (ties count half)."""
    ids = np.asarray([prompt + a for a in answers], np.int32)
    start = len(prompt) - 1  # the logits that predict the answers' tokens, sliced where they are (on the device)
    logp, _ = target_logprobs(logits_fn(ids[:, :-1])[:, start:], ids[:, start + 1:])
    totals = logp.sum(axis=1)
    beaten = float(np.sum(totals[0] > totals[1:]) + 0.5 * np.sum(totals[0] == totals[1:]))
    return totals, beaten / (len(answers) - 1)


def graded_scores(samples: list[NiahSample], logits_fn: LogitsFn, tokenizer: Tokenizer, *,
                  candidates: int = GRADED_CANDIDATES, progress: bool = True) -> list[dict]:
    """A score that lifts comparisons off the 0 % floor of exact retrieval: per sample, the teacher-forced
    log-probability of the answer prompt + " " + value for the true value and `candidates - 1` others of the same
    token length, and where the true one ranks. Per sample: `graded_rank` (0: the true value scores highest),
    `graded_score` = the fraction of the others it beats (1: first; 0.5: chance; ties count half) and
    `graded_top1`; and the same score on the needle-free prompt (`needle_free_prompt`), `control_score` and
    `control_top1`, which a model can only move off chance (0.5 in expectation) by preferring some values a priori:
    the negative control, so a graded score is read against it. logits_fn: [B, T] -> [B, T, E], called with each
    prompt's candidates as one batch."""
    check.integer("candidates", candidates, minimum=2)
    check_tokenizer(tokenizer)
    out = []
    for sample in progress_bar(samples, desc="niah graded", disable=not progress):
        answers = [list(tokenizer.encode(" " + v)) for v in graded_candidates(sample, tokenizer, candidates)]
        totals, score = _rank(list(tokenizer.encode(sample.prompt)), answers, logits_fn)
        control, control_score = _rank(list(tokenizer.encode(needle_free_prompt(sample))), answers, logits_fn)
        out.append({"task": sample.task, "length": sample.length, "depth": sample.depth, "index": sample.index,
                    "graded_rank": int(np.sum(totals[1:] > totals[0])), "graded_score": score,
                    "graded_top1": bool(np.all(totals[0] > totals[1:])), "logprobs": totals.tolist(),
                    "control_score": control_score, "control_top1": bool(np.all(control[0] > control[1:])),
                    "control_logprobs": control.tolist()})
    return out


def needle_lift(record: dict) -> float:
    """How much the needle raises the true value's log-probability beyond what it does to the other candidates', in
    nats: (true with needle - true without) - mean over the others of (with - without). 0 for a model that ignores
    the needle, whatever its preferences among the values; positive for one that reads it."""
    lift = np.asarray(record["logprobs"]) - np.asarray(record["control_logprobs"])
    return float(lift[0] - np.mean(lift[1:]))


def summarize_graded(records: list[dict]) -> dict:
    """Mean graded score and top-1 rate, overall and per length (0.5 and 1 / candidates are chance), and the
    needle-free control's and the `needle_lift` where the records have them (records written before the control
    have not)."""
    lengths = sorted({r["length"] for r in records})
    controlled = "control_logprobs" in records[0]
    records = [r | {"needle_lift": needle_lift(r)} for r in records] if controlled else records
    keys = ["graded_score", "graded_top1"] + (["control_score", "control_top1", "needle_lift"] if controlled else [])
    mean = lambda rs: {k: float(np.mean([r[k] for r in rs])) for k in keys}
    return mean(records) | {"by_length": {n: mean([r for r in records if r["length"] == n]) for n in lengths}}


def summarize(records: list[dict]) -> dict:
    """Mean score per (length, depth) cell, per length and overall (percent)."""
    cells: dict[int, dict[int, list[float]]] = {}
    for r in records:
        cells.setdefault(r["length"], {}).setdefault(r["depth"], []).append(r["score"])
    grid = {length: {d: float(np.mean(s)) for d, s in sorted(by_d.items())} for length, by_d in sorted(cells.items())}
    by_length = {length: float(np.mean([s for ss in cells[length].values() for s in ss])) for length in grid}
    return {"by_length_depth": grid, "by_length": by_length, "overall": float(np.mean([r["score"] for r in records]))}


def plot_heatmap(summary: dict, path, *, title: str = "S-NIAH"):
    """PNG heatmap of the score: depth (rows) x length (columns), 0 red to 100 green."""
    grid = summary["by_length_depth"]
    lengths = sorted(grid)
    depths = sorted({d for by_d in grid.values() for d in by_d})
    values = [[grid[length].get(d, np.nan) for length in lengths] for d in depths]
    return heatmap(
        values, path, row_labels=depths, col_labels=lengths, xlabel="context length (tokens)",
        ylabel="needle depth (%)", title=title, cbar_label="score (%)", vmin=0, vmax=100,
    )
