"""The `ccq-eval` subcommands: each one's options and how it runs the evaluation modules on a model.

Each `run_*` takes a `Context` (model, tokenizer, label, output folder, arguments) and
returns (results for the JSON record, a text table). Inputs the model should see as a
document start (S-NIAH, LongBench, lm-eval prompts, extrapolation sequences, Delta-mu
prompts) get the tokenizer's document-start token in front, as in training; `ppl` scores a
token stream with rolling windows and puts that token only in front of the stream.
"""

import argparse
import json
import pathlib

import numpy as np

from ccq_jax import checks as check
from ccq_jax import engagement
from ccq_jax.configlib import check_choice
from eval import delta_mu, niah
from eval.longbench import DATASET2METRIC, PAPER_TASKS, predict_dataset, score_predictions
from eval.perplexity import fixed_length_sequences, plot_perplexity_vs_length, streaming_nll, windowed_perplexity
from eval.plots import heatmap
from eval.records import read_jsonl, write_jsonl
from eval.runs import Command, Context
from eval.text_sources import load_texts


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(choices):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(x for x in text.split(",") if x)
        try:
            for name in names:
                check_choice("name", name, choices)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return names

    return parse


def _add_text_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="local .txt/.jsonl/.parquet file, folder or glob, or a HF dataset id")
    p.add_argument("--column", default="text", help="text field of .jsonl / parquet / HF records")
    p.add_argument("--split", default="test", help="HF dataset split")
    p.add_argument("--hf-config", default=None, help="HF dataset config")
    p.add_argument("--limit", type=int, default=None, help="use the first N documents")


def _texts(args) -> list[str]:
    return load_texts(args.data, column=args.column, split=args.split, config=args.hf_config, limit=args.limit)


# ppl ------------------------------------------------------------------------------------------------------------

def _add_ppl(p):
    _add_text_source(p)
    p.add_argument("--window", type=int, default=2048, help="tokens per forward")
    p.add_argument("--stride", type=int, default=None, help="tokens between window starts (default window // 2)")
    p.add_argument("--separator", default="\n\n", help="joins the documents into one stream (WikiText style)")


def run_ppl(ctx: Context):
    a = ctx.args
    texts = _texts(a)
    text = a.separator.join(texts)
    stride = a.stride if a.stride is not None else max(1, a.window // 2)
    tokens = ctx.tokenizer.encode(text)
    if len(tokens) < 2:
        raise ValueError(f"--data: {a.data} holds {len(tokens)} token(s) of text in {len(texts)} document(s); "
                         f"perplexity needs at least 2")
    res = windowed_perplexity(tokens, ctx.runner(prefix=False).logits, window=a.window,
                              stride=stride, batch_size=a.batch_size, bos_id=ctx.tokenizer.document_start,
                              num_bytes=len(text.encode("utf-8")), progress=ctx.progress)
    table = (f"perplexity {res.perplexity:.4f}   bits per byte {res.bits_per_byte:.4f}   "
             f"({res.num_tokens} tokens of {len(texts)} documents, window {a.window}, stride {stride})")
    return res.to_dict() | {"num_documents": len(texts), "stride": stride}, table


# extrapolation --------------------------------------------------------------------------------------------------

def _add_extrapolation(p):
    _add_text_source(p)
    p.add_argument("--lengths", type=_ints, required=True, help="evaluation lengths, e.g. 1024,2048,4096")
    p.add_argument("--chunk-size", type=int, default=1024, help="tokens per step through the recurrent cache")
    p.add_argument("--num-sequences", type=int, default=None, help="use at most N sequences")
    p.add_argument("--pack", action="store_true",
                   help="cut sequences from the concatenated documents (EOS between) instead of long documents")
    p.add_argument("--compare", action="append", default=[], metavar="JSON",
                   help="an earlier extrapolation.json whose curve joins the plot (repeatable)")


def run_extrapolation(ctx: Context):
    a = ctx.args
    check.integer("--num-sequences", a.num_sequences, minimum=1, optional=True)
    eos = [ctx.tokenizer.eos_id] if a.pack else []
    docs = [ctx.tokenizer.encode(t) + eos for t in _texts(a)]
    longest = max(a.lengths)
    seqs = fixed_length_sequences(docs, longest, pack=a.pack)[: a.num_sequences]
    runner = ctx.runner(max_length=longest + 1)
    nll = streaming_nll(seqs, runner.step, runner.init_carry, chunk_size=a.chunk_size, batch_size=a.batch_size,
                        progress=ctx.progress)
    curve = nll.perplexity_at(sorted(a.lengths))
    curves = {ctx.label: curve}
    for path in a.compare:
        other = json.loads(pathlib.Path(path).read_text())
        curves[other["label"]] = {int(k): v for k, v in other["results"]["perplexity"].items()}
    png = plot_perplexity_vs_length(curves, ctx.out / "extrapolation.png")
    widths = [max(10, len(name)) for name in curves]
    lines = [f"{'length':>8}  " + "  ".join(f"{name:>{w}}" for name, w in zip(curves, widths))]
    for length in sorted({x for c in curves.values() for x in c}):
        cells = [f"{c[length]:>{w}.4f}" if length in c else f"{'-':>{w}}" for c, w in zip(curves.values(), widths)]
        lines.append(f"{length:>8}  " + "  ".join(cells))
    results = {"perplexity": curve, "num_sequences": len(seqs), "sequence_length": longest, "plot": str(png)}
    return results, "\n".join(lines)


# niah -----------------------------------------------------------------------------------------------------------

def _add_niah(p):
    p.add_argument("--tasks", type=_names(niah.TASKS), default=tuple(niah.TASKS), help="comma-separated S-NIAH tasks")
    p.add_argument("--lengths", type=_ints, required=True, help="context lengths in tokens, e.g. 1024,2048,4096")
    p.add_argument("--depths", type=_ints, default=niah.DEFAULT_DEPTHS, help="needle depths in percent")
    p.add_argument("--num-samples", type=int, default=10, help="samples per (length, depth) cell")
    p.add_argument("--sample-seed", type=int, default=42, help="seed of the generated samples")
    p.add_argument("--essay-dir", default=None, help="folder of .txt essays (default: built-in public-domain text)")
    p.add_argument("--max-new-tokens", type=int, default=niah.TOKENS_TO_GENERATE, help="tokens generated per sample")
    p.add_argument("--graded", action="store_true",
                   help=f"also the graded score: the teacher-forced rank of the true value among "
                        f"{niah.GRADED_CANDIDATES} values of its token length (0.5: chance), and the same on the "
                        f"prompt without its needle (the negative control)")


GRADED_ROWS = (  # the S-NIAH table's rows under each task with --graded: label, summary key, decimals, how to read it
    ("  graded", "graded_score", 3, "rank score; 0.5 chance, 1 first"),
    ("  no needle", "control_score", 3, "the same without the needle: ~0.5"),
    ("  needle lift", "needle_lift", 2, "nats the needle adds to the true value: ~0 unread"))


def run_niah(ctx: Context):
    a = ctx.args
    runner = ctx.runner()
    results, lines = {}, [f"{'task':<14} " + " ".join(f"{n:>7}" for n in sorted(a.lengths)) + f" {'overall':>8}"]
    for task in a.tasks:
        samples = niah.generate_samples(task, ctx.tokenizer, lengths=a.lengths, depths=a.depths,
                                        num_samples=a.num_samples, seed=a.sample_seed,
                                        tokens_to_generate=a.max_new_tokens, essay_dir=a.essay_dir,
                                        progress=ctx.progress)
        records = niah.run_niah(samples, runner.generate, ctx.tokenizer, max_new_tokens=a.max_new_tokens,
                                batch_size=a.batch_size, progress=ctx.progress)
        write_jsonl(ctx.out / f"{task}.jsonl.gz", records)
        summary = niah.summarize(records)
        niah.plot_heatmap(summary, ctx.out / f"{task}.png", title=f"{task}: {ctx.label}")
        results[task] = summary
        lines.append(f"{task:<14} " + " ".join(f"{summary['by_length'][n]:>7.1f}" for n in sorted(a.lengths))
                     + f" {summary['overall']:>8.1f}")
        if a.graded:
            graded = niah.graded_scores(samples, runner.logits, ctx.tokenizer, progress=ctx.progress)
            write_jsonl(ctx.out / f"{task}_graded.jsonl.gz", graded)
            summary["graded"] = niah.summarize_graded(graded)
            g, by = summary["graded"], summary["graded"]["by_length"]
            for label, key, digits, note in GRADED_ROWS:
                lines.append(f"{label:<14} " + " ".join(f"{by[n][key]:>7.{digits}f}" for n in sorted(a.lengths))
                             + f" {g[key]:>8.{digits}f}  ({note})")
    return results, "\n".join(lines)


# lm-eval --------------------------------------------------------------------------------------------------------

def _add_lm_eval(p):
    p.add_argument("--tasks", type=lambda s: tuple(x for x in s.split(",") if x), required=True,
                   help="comma-separated lm-eval task names")
    p.add_argument("--include-path", default=None,
                   help="folder of task YAMLs (e.g. tasks reading local data files); built-in tasks are indexed "
                        "only when a requested task is not found there")
    p.add_argument("--num-fewshot", type=int, default=None)
    p.add_argument("--limit", type=float, default=None, help="documents per task (a fraction if < 1)")
    p.add_argument("--max-length", type=int, default=2048, help="context tokens the model sees")
    p.add_argument("--max-gen-toks", type=int, default=None, help="default tokens per generate_until request")


def _task_manager(include_path, tasks):
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        local = TaskManager(include_path=include_path, include_defaults=False)
        if all(t in local.all_tasks for t in tasks):
            return local
    return TaskManager(include_path=include_path)


def run_lm_eval(ctx: Context):
    a = ctx.args
    try:
        import lm_eval
        from lm_eval.utils import make_table

        from eval.lm_eval_adapter import HarnessLM
    except ImportError as err:
        raise ValueError(f"lm-eval: needs the lm-eval package (pip install 'ccq-jax[eval]'): {err}") from err
    runner = ctx.runner()
    lm = HarnessLM(runner.logits, runner.generate, ctx.tokenizer, batch_size=a.batch_size, max_length=a.max_length,
                   max_gen_toks=a.max_gen_toks)
    manager = _task_manager(a.include_path, a.tasks)
    unknown = [t for t in a.tasks if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"--tasks: lm-eval knows no task {unknown}" + (
            "" if a.include_path else "; local task YAMLs go in a folder passed with --include-path"))
    out = lm_eval.simple_evaluate(model=lm, tasks=list(a.tasks), num_fewshot=a.num_fewshot, limit=a.limit,
                                  task_manager=manager, bootstrap_iters=0, log_samples=False)
    results = {"results": out["results"], "n-shot": out.get("n-shot", {}), "versions": out.get("versions", {})}
    return json.loads(json.dumps(results, default=str)), make_table(out)


# longbench ------------------------------------------------------------------------------------------------------

def _add_longbench(p):
    p.add_argument("--data-dir", required=True, help="LongBench data: one {dataset}.jsonl per task")
    p.add_argument("--config-dir", default=None,
                   help="folder with LongBench's dataset2prompt.json and dataset2maxlen.json (default: --data-dir)")
    p.add_argument("--datasets", type=_names(DATASET2METRIC), default=PAPER_TASKS,
                   help="comma-separated tasks (default: the 14 English tasks the papers average)")
    p.add_argument("--max-length", type=int, default=4096, help="prompt tokens kept (LongBench's middle truncation)")
    p.add_argument("--limit", type=int, default=None, help="use the first N records of each task")


def _longbench_inputs(a) -> tuple[dict, dict, dict]:
    """(records, prompt formats, generation lengths) per dataset, all checked before the model runs."""
    check.integer("--limit", a.limit, minimum=1, optional=True)
    data_dir = pathlib.Path(a.data_dir)
    config_dir = pathlib.Path(a.config_dir or a.data_dir)
    arg = "--config-dir" if a.config_dir else "--config-dir (default: --data-dir)"
    configs = []
    for name in ("dataset2prompt.json", "dataset2maxlen.json"):
        if not (config_dir / name).is_file():
            raise ValueError(f"{arg}: {config_dir} lacks LongBench's {name} (from LongBench's config/ folder)")
        configs.append(json.loads((config_dir / name).read_text(encoding="utf-8")))
    missing = [d for d in a.datasets if not (data_dir / f"{d}.jsonl").is_file()]
    missing += [f"{d} (config)" for d in a.datasets if d not in configs[0] or d not in configs[1]]
    if missing:
        raise ValueError(f"--datasets: no data or config for {missing} in {data_dir} / {config_dir}")
    records = {d: read_jsonl(data_dir / f"{d}.jsonl")[: a.limit] for d in a.datasets}
    return records, configs[0], configs[1]


def run_longbench(ctx: Context):
    a = ctx.args
    records, prompts, maxlen = _longbench_inputs(a)
    runner = ctx.runner()
    pred_dir = ctx.out / "longbench_pred"
    for d in a.datasets:
        preds = predict_dataset(records[d], runner.generate, ctx.tokenizer, prompt_format=prompts[d],
                                max_new_tokens=maxlen[d], max_length=a.max_length, batch_size=a.batch_size,
                                progress=ctx.progress)
        write_jsonl(pred_dir / f"{d}.jsonl", preds)
    scores = score_predictions(pred_dir, datasets=a.datasets)
    lines = [f"{d:<22} {s:>7.2f}" for d, s in scores["scores"].items()]
    lines.append(f"{f'average ({len(a.datasets)} tasks)':<22} {scores['average']:>7.2f}")
    return scores | {"predictions": str(pred_dir)}, "\n".join(lines)


# delta-mu -------------------------------------------------------------------------------------------------------

def _add_delta_mu(p):
    p.add_argument("--task", choices=tuple(niah.TASKS), default="niah_single_2", help="S-NIAH task of the prompts")
    p.add_argument("--length", type=int, default=2048, help="prompt length in tokens")
    p.add_argument("--depths", type=_ints, default=(10, 30, 50, 70, 90), help="needle depths in percent")
    p.add_argument("--num-samples", type=int, default=2, help="prompts per depth")
    p.add_argument("--sample-seed", type=int, default=42, help="seed of the generated prompts")
    p.add_argument("--essay-dir", default=None, help="folder of .txt essays (default: built-in public-domain text)")
    p.add_argument("--top-k", type=int, default=16, help="dimension of the principal subspace")
    p.add_argument("--needle", choices=("value", "sentence"), default="value",
                   help="needle tokens: the needle's value, or its whole sentence")
    p.add_argument("--uncentered", action="store_true", help="covariance without subtracting the mean key")


def run_delta_mu(ctx: Context):
    a = ctx.args
    samples = niah.generate_samples(a.task, ctx.tokenizer, lengths=[a.length], depths=a.depths,
                                    num_samples=a.num_samples, seed=a.sample_seed, tokens_to_generate=0,
                                    essay_dir=a.essay_dir, progress=ctx.progress)
    prompts = [ctx.tokenizer.encode(s.prompt) for s in samples]
    keys = ctx.runner().keys(prompts)
    results = []
    for sample, ids, layer_keys in zip(samples, prompts, keys):
        span = sample.value_token_span if a.needle == "value" else sample.needle_token_span
        results.append(delta_mu.delta_mu(layer_keys, range(*span), len(ids) - 1, top_k=a.top_k,
                                         centered=not a.uncentered))
    summary = delta_mu.summarize(results)
    title = f"Delta-mu: {ctx.label}"
    summary["plots"] = [str(delta_mu.plot_heatmap(summary, ctx.out / "delta_mu_heatmap.png", title=title)),
                        str(delta_mu.plot_histograms(results, ctx.out / "delta_mu_histograms.png"))]
    summary["prompts"] = [{"depth": s.depth, "index": s.index, "num_tokens": len(ids),
                           "delta_mu": float(r.delta.mean())} for s, ids, r in zip(samples, prompts, results)]
    return summary, delta_mu.format_table(summary)


# read -------------------------------------------------------------------------------------------------------------

def _add_read(p):
    _add_text_source(p)
    p.add_argument("--length", type=int, default=2048, help="tokens per sequence (the document-start token first)")
    p.add_argument("--num-sequences", type=int, default=8, help="sequences cut from the concatenated documents")
    p.add_argument("--tail", type=int, default=0,
                   help="also average the contraction over each sequence's last N tokens (the positions column)")


def run_read(ctx: Context):
    a = ctx.args
    check.integer("--num-sequences", a.num_sequences, minimum=1)
    check.integer("--tail", a.tail, minimum=0)
    docs = [ctx.tokenizer.encode(t) + [ctx.tokenizer.eos_id] for t in _texts(a)]
    rows = fixed_length_sequences(docs, a.length - 1, pack=True)[: a.num_sequences]
    ids = np.concatenate([np.full((len(rows), 1), ctx.tokenizer.document_start, np.int32), rows], axis=1)
    positions = np.arange(a.length)[None].repeat(len(rows), 0) >= a.length - a.tail
    report = engagement.read_engagement(ctx.model, ids, positions=positions)
    layers = [layer["layer"] for layer in report["layers"]]
    heads = range(len(report["layers"][0]["heads"]["lambda_mean"]))
    report["plots"] = [str(heatmap([layer["heads"][name] for layer in report["layers"]], ctx.out / f"read_{name}.png",
                                   row_labels=layers, col_labels=heads, xlabel="head", ylabel="layer",
                                   title=f"{title}: {ctx.label}", cmap="viridis"))
                       for name, title in (("applied_mean", "applied contraction |q - q_clean| / |q|"),
                                           ("effective_rank", "effective rank of Sigma"))]
    report["num_sequences"], report["length"] = len(rows), a.length
    return report, engagement.format_table(report)


COMMANDS = {
    "ppl": Command("token perplexity and bits per byte with rolling windows", _add_ppl, run_ppl,
                   ("data", "column", "split", "hf_config", "limit", "window", "stride", "separator")),
    "extrapolation": Command("perplexity vs evaluation length, streamed through the recurrent cache",
                             _add_extrapolation, run_extrapolation,
                             ("data", "column", "split", "hf_config", "limit", "lengths", "chunk_size",
                              "num_sequences", "pack", "compare")),
    "niah": Command("RULER-compatible S-NIAH on a length x depth grid", _add_niah, run_niah,
                    ("tasks", "lengths", "depths", "num_samples", "sample_seed", "essay_dir", "max_new_tokens",
                     "graded")),
    "lm-eval": Command("lm-evaluation-harness tasks through the jit-compiled model", _add_lm_eval, run_lm_eval,
                       ("tasks", "include_path", "num_fewshot", "limit", "max_length", "max_gen_toks")),
    "longbench": Command("LongBench predictions and scores from local data", _add_longbench, run_longbench,
                         ("data_dir", "config_dir", "datasets", "max_length", "limit")),
    "delta-mu": Command("Delta-mu: needle vs distractor key alignment with the key covariance's top-k subspace",
                        _add_delta_mu, run_delta_mu,
                        ("task", "length", "depths", "num_samples", "sample_seed", "essay_dir", "top_k", "needle",
                         "uncentered")),
    "read": Command("how engaged the CCQ read is: lambda, the applied contraction |q - q_clean| / |q|, Sigma's "
                    "top eigenvalues and effective rank, per layer and head", _add_read, run_read,
                    ("data", "column", "split", "hf_config", "limit", "length", "num_sequences", "tail")),
}
