"""LongBench's per-answer metrics, reproducing `THUDM/LongBench` `metrics.py` (v1) score for score.

Each function takes one prediction and one reference answer and returns a score in [0, 1].
Reproduced as LongBench computes them, quirks included, so that numbers compare with published
tables:
- `rouge_score` is the `rouge` package's ROUGE-L F (`Rouge().get_scores(..., avg=True)["rouge-l"]["f"]`):
  sentences split on ".", a union-LCS over sentences counted on distinct words; it is 0 when the
  package raises (an empty text, or a sentence long enough to exceed Python's recursion limit in
  its LCS back-trace), as LongBench's `except` does;
- `code_sim_score` is fuzzywuzzy's `fuzz.ratio` as `pip install fuzzywuzzy` gives it (no
  python-Levenshtein: LongBench's and lm-eval's `longbench` requirements), i.e. difflib's
  `SequenceMatcher` ratio rounded to an integer percent; computed here with difflib directly;
- `classification_score` keeps LongBench's loop that removes items from the list it iterates
  over (skipping the item after each removal), and its fuzzy fallback never runs there (its
  guard `em_match_list != 0` is always true), so no match scores 0.
Chinese metrics need `jieba` (`pip install jieba`); without it they raise ImportError.
"""

import difflib
import re
import string
from collections import Counter

_PUNCTUATION = frozenset(string.punctuation)
_ZH_PUNCTUATION = "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏."


def _jieba_cut(text: str) -> list[str]:
    try:
        import jieba
    except ImportError as e:
        raise ImportError(
            "Chinese LongBench metrics (multifieldqa_zh, dureader, vcsum, lsht) need jieba: pip install jieba"
        ) from e
    return list(jieba.cut(text, cut_all=False))


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation, drop articles, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def normalize_zh_answer(s: str) -> str:
    """Lower-case, drop ASCII and Chinese punctuation, remove all whitespace."""
    return "".join("".join(ch for ch in s.lower() if ch not in _PUNCTUATION and ch not in _ZH_PUNCTUATION).split())


def f1_score(prediction: list[str], ground_truth: list[str]) -> float:
    """Token-multiset F1."""
    same = sum((Counter(prediction) & Counter(ground_truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction), same / len(ground_truth)
    return 2 * precision * recall / (precision + recall)


def qa_f1_score(prediction: str, ground_truth: str, **_) -> float:
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def qa_f1_zh_score(prediction: str, ground_truth: str, **_) -> float:
    def tokens(text):
        return [t for t in (normalize_zh_answer(w) for w in _jieba_cut(text)) if t]

    return f1_score(tokens(prediction), tokens(ground_truth))


def rouge_score(prediction: str, ground_truth: str, **_) -> float:
    from rouge import Rouge

    try:
        return Rouge().get_scores([prediction], [ground_truth], avg=True)["rouge-l"]["f"]
    except (ValueError, RecursionError):
        return 0.0


def rouge_zh_score(prediction: str, ground_truth: str, **_) -> float:
    return rouge_score(" ".join(_jieba_cut(prediction)), " ".join(_jieba_cut(ground_truth)))


def classification_score(prediction: str, ground_truth: str, *, all_classes: list[str], **_) -> float:
    matches = [c for c in all_classes if c in prediction]
    for term in matches:  # LongBench's loop, removal during iteration included
        if term in ground_truth and term != ground_truth:
            matches.remove(term)
    return 1.0 / len(matches) if ground_truth in matches else 0.0


def _id_match_score(prediction: str, ground_truth: str, pattern: str) -> float:
    ids = re.findall(pattern, ground_truth)
    if not ids:
        raise ValueError(f"ground_truth: expected an answer matching {pattern!r}, got {ground_truth!r}")
    target = ids[0]
    numbers = re.findall(r"\d+", prediction)
    return sum(n == target for n in numbers) / len(numbers) if numbers else 0.0


def retrieval_score(prediction: str, ground_truth: str, **_) -> float:
    """Share of the numbers in the prediction equal to the paragraph id of "Paragraph N"."""
    return _id_match_score(prediction, ground_truth, r"Paragraph (\d+)")


def retrieval_zh_score(prediction: str, ground_truth: str, **_) -> float:
    return _id_match_score(prediction, ground_truth, r"段落(\d+)")


def count_score(prediction: str, ground_truth: str, **_) -> float:
    """Share of the numbers in the prediction equal to the answer."""
    numbers = re.findall(r"\d+", prediction)
    return sum(n == str(ground_truth) for n in numbers) / len(numbers) if numbers else 0.0


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's `fuzz.ratio` (pure-Python path): 100 if equal, 0 if either is empty, else rounded difflib ratio."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


def code_sim_score(prediction: str, ground_truth: str, **_) -> float:
    """fuzz ratio of the first generated line that is not a comment or fence (no `, # or //) and the answer."""
    lines = prediction.lstrip("\n").split("\n")
    first = next((line for line in lines if not any(m in line for m in ("`", "#", "//"))), "")
    return fuzz_ratio(first, ground_truth) / 100
