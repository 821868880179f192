"""Each source kind reads what it should: text, jsonl, parquet, HF datasets, ArrayRecord via ccq-prepare-data;
bad files, bad shards and missing optional packages raise errors naming the `DataConfig` field or the package."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from train.data import DataConfig, build_pipeline
from train.data.prepare import main as prepare
from train.data.shards import MANIFEST
from train.data.sources import text_source

from .conftest import documents_in


def _read_all(config):
    source = text_source(config)
    return [source[i] for i in range(len(source))]


def _one_epoch(config):
    it = iter(build_pipeline(config, process_index=0, process_count=1).dataset)
    try:
        return documents_in(list(it))
    finally:
        it.close()


def test_text_one_document_per_file(tmp_path, documents):
    for i, doc in enumerate(documents[:5]):
        (tmp_path / f"{i:02d}.txt").write_text(doc, encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a .txt file")
    assert _read_all(DataConfig(source="text", paths=(str(tmp_path),))) == documents[:5]
    assert _read_all(DataConfig(source="text", paths=(str(tmp_path / "0[12].txt"),))) == documents[1:3]
    assert _read_all(DataConfig(source="text", paths=(str(tmp_path / "notes.md"),))) == ["not a .txt file"]


def test_text_paragraphs_split_on_blank_lines(tmp_path):
    text = "\n\nfirst line\nsecond line\n\n  \n\nnext para\r\nends here\n\n\nlast"
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    got = _read_all(DataConfig(source="text", paths=(str(tmp_path / "a.txt"),), text_split="blank_line"))
    assert got == ["first line\nsecond line", "next para\r\nends here", "last"]


def test_jsonl_reads_the_text_field(jsonl_corpus, documents):
    config = DataConfig(source="jsonl", paths=(str(jsonl_corpus),), text_field="body", seq_len=32, batch_size=2)
    assert _read_all(config) == documents
    message = r"text_field: the record at byte 0 of .*part0.jsonl.* has no string field 'text' \(it has \['body', 'id'\]\)"
    with pytest.raises(ValueError, match=message):
        text_source(DataConfig(source="jsonl", paths=(str(jsonl_corpus),)))


@pytest.mark.parametrize("line,message", [
    ("{not json", r"paths: '.*bad\.jsonl' at byte 14 is not valid JSON: "),
    ("[1, 2]", r"text_field: the record at byte 14 of '.*bad\.jsonl' has no string field 'text' "
               r"\(it is a list, not a JSON object\)"),
    ('{"text": null}', r"text_field: the record at byte 14 of .* has no string field 'text' \(it has \['text'\]\)"),
])
def test_bad_jsonl_records(tmp_path, line, message):
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n' + line + "\n")
    source = text_source(DataConfig(source="jsonl", paths=(str(tmp_path / "bad.jsonl"),)))
    assert source[0] == "a"
    with pytest.raises(ValueError, match=message):
        source[1]


def test_paths_that_match_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"paths: '.*nothing\*.jsonl' matches no file"):
        text_source(DataConfig(source="jsonl", paths=(str(tmp_path / "nothing*.jsonl"),)))


def test_parquet_reads_the_text_column(tmp_path, documents):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    for part, chunk in enumerate((documents[:8], documents[8:])):
        table = pa.table({"text": chunk, "n": list(range(len(chunk)))})
        pq.write_table(table, tmp_path / f"p{part}.parquet", row_group_size=3)
    config = DataConfig(source="parquet", paths=(str(tmp_path),), seq_len=32, batch_size=2, num_epochs=1, shuffle=False)
    assert _read_all(config) == documents
    assert _one_epoch(config) == documents
    message = r"text_field: .*p0.parquet' has no column 'body' \(columns: \['text', 'n'\]\)"
    with pytest.raises(ValueError, match=message):
        text_source(DataConfig(source="parquet", paths=(str(tmp_path),), text_field="body"))


def test_parquet_errors(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": ["a", None, None]}), tmp_path / "nulls.parquet")
    config = DataConfig(source="parquet", paths=(str(tmp_path),))
    with pytest.raises(ValueError, match=r"text_field: column 'text' of '.*nulls\.parquet' has 2 null values"):
        text_source(config)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"reading parquet files needs `pip install pyarrow`"):
        text_source(config)


def test_hf_without_datasets_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"hf_dataset: loading 'org/corpus' as a Hugging Face dataset needs the "
                                          r"optional package `datasets` \(pip install datasets\)"):
        text_source(DataConfig(source="hf", hf_dataset="org/corpus"))


def test_hf_dataset_from_a_saved_directory(tmp_path, documents):
    datasets = pytest.importorskip("datasets", reason="the optional `datasets` package is not installed")
    datasets.Dataset.from_dict({"content": documents}).save_to_disk(str(tmp_path / "saved"))
    splits = datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"content": documents[:4]})})
    splits.save_to_disk(str(tmp_path / "dict"))
    saved = DataConfig(source="hf", hf_dataset=str(tmp_path / "saved"), text_field="content", num_epochs=1, shuffle=False)
    assert _read_all(saved) == documents and _one_epoch(saved) == documents
    split = DataConfig(source="hf", hf_dataset=str(tmp_path / "dict"), text_field="content", hf_split="validation")
    assert _read_all(split) == documents[:4]
    with pytest.raises(ValueError, match=r"hf_split: .* has no split 'train' \(splits: \['validation'\]\)"):
        text_source(DataConfig(source="hf", hf_dataset=str(tmp_path / "dict"), text_field="content"))
    with pytest.raises(ValueError, match=r"text_field: the dataset has no column 'text' \(columns: \['content'\]\)"):
        text_source(DataConfig(source="hf", hf_dataset=str(tmp_path / "saved")))


def test_hf_dataset_unreachable_offline_names_the_dataset(tmp_path):
    pytest.importorskip("datasets", reason="the optional `datasets` package is not installed")
    code = (
        "from train.data import DataConfig\nfrom train.data.sources import text_source\n"
        "try:\n    text_source(DataConfig(source='hf', hf_dataset='someone/absent_corpus'))\n"
        "except ValueError as e:\n    print(e)\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    expected = "hf_dataset: cannot load 'someone/absent_corpus' (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set)"
    assert out.startswith(expected), out


def test_array_record_round_trip_through_prepare(tmp_path, jsonl_corpus, documents, capsys):
    out = tmp_path / "prepared"
    args = ["--source", "jsonl", "--paths", str(jsonl_corpus), "--text-field", "body", "--output", str(out)]
    assert prepare([*args, "--docs-per-shard", "10"]) == 0
    summary = capsys.readouterr().out
    tokens = sum(len(d.encode("utf-8")) for d in documents)
    assert f"{len(documents)} documents, {tokens:,} tokens" in summary and "3 shards" in summary
    manifest = json.loads((out / MANIFEST).read_text())
    assert [s["documents"] for s in manifest["shards"]] == [10, 10, 3] and manifest["dtype"] == "<u2"
    assert manifest["tokenizer"]["kind"] == "byte" and manifest["source"]["text_field"] == "body"
    config = DataConfig(source="array_record", paths=(str(out),), num_epochs=1, shuffle=False)
    assert _one_epoch(config) == documents
    with pytest.raises(SystemExit):  # refuses to mix with old shards
        prepare(args)
    assert "already holds prepared shards" in capsys.readouterr().err
    assert prepare([*args, "--overwrite"]) == 0 and len(list(out.glob("shard-*"))) == 1


def test_array_record_with_another_tokenizer_is_rejected(tmp_path, jsonl_corpus):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "</s>": 1}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "prepared"
    prepare(["--source", "jsonl", "--paths", str(jsonl_corpus), "--text-field", "body", "--output", str(out)])
    config = DataConfig(source="array_record", paths=(str(out),), tokenizer=str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="tokenizer: the shards in .* were tokenised with"):
        build_pipeline(config, process_index=0, process_count=1)
    with pytest.raises(ValueError, match="is not a directory prepared by ccq-prepare-data"):
        build_pipeline(DataConfig(source="array_record", paths=(str(jsonl_corpus),)), process_index=0, process_count=1)


def _edited_copy(prepared, copy, **changes):
    """A copy of a prepared directory whose manifest has `changes`."""
    shutil.copytree(prepared, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    (copy / MANIFEST).write_text(json.dumps(manifest | changes))
    return copy


def test_bad_prepared_directories(tmp_path, jsonl_corpus):
    prepared = tmp_path / "prepared"
    prepare(["--source", "jsonl", "--paths", str(jsonl_corpus), "--text-field", "body", "--output", str(prepared)])

    def build(*paths):
        config = DataConfig(source="array_record", paths=tuple(str(p) for p in paths))
        return build_pipeline(config, process_index=0, process_count=1)

    with pytest.raises(ValueError, match=r"paths: '.*v2/manifest\.json' is not a ccq-token-shards v1 manifest"):
        build(_edited_copy(prepared, tmp_path / "v2", version=2))
    other = {"kind": "hf", "sha256": "0" * 64, "vocab_size": 384, "bos_id": 256, "eos_id": 257}
    with pytest.raises(ValueError, match=r"paths: '.*other' was tokenised differently from '.*prepared'"):
        build(prepared, _edited_copy(prepared, tmp_path / "other", tokenizer=other))
    with pytest.raises(ValueError, match=r"paths: the prepared directories use different token dtypes \['<u2', '<u4'\]"):
        build(prepared, _edited_copy(prepared, tmp_path / "wide", dtype="<u4"))
    missing = _edited_copy(prepared, tmp_path / "missing")
    (shard,) = missing.glob("shard-*")
    shard.unlink()
    with pytest.raises(ValueError, match=rf"paths: shard '.*missing/{shard.name}' listed in the manifest is missing"):
        build(missing)


@pytest.mark.parametrize("argv,message", [
    (["--source", "jsonl"], "paths: source 'jsonl' needs at least one file"),
    (["--source", "jsonl", "--paths", "x.jsonl", "--docs-per-shard", "0"], "--docs-per-shard: must be >= 1, got 0"),
])
def test_prepare_reports_config_errors(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        prepare([*argv, "--output", str(tmp_path)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    np.testing.assert_equal(list(tmp_path.iterdir()), [])


def test_bytes_that_are_not_utf8_name_the_file_or_are_replaced(tmp_path, capsys):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (tmp_path / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    for source in ("text", "jsonl"):
        path = str(tmp_path / f"latin1.{'txt' if source == 'text' else 'jsonl'}")
        with pytest.raises(ValueError, match=rf"paths: '{path}' is not UTF-8 text \(byte \d+: invalid continuation "
                                             r"byte\); .*encoding_errors='replace'"):
            _read_all(DataConfig(source=source, paths=(path,)))
    assert _read_all(DataConfig(source="text", paths=(str(tmp_path / "latin1.txt"),),
                                encoding_errors="replace")) == ["caf\ufffd au lait"]
    assert _read_all(DataConfig(source="jsonl", paths=(str(tmp_path / "latin1.jsonl"),),
                                encoding_errors="ignore")) == ["caf"]
    with pytest.raises(ValueError, match=r"encoding_errors: unknown value 'skip'; expected one of \('strict', "):
        DataConfig(source="text", paths=("x",), encoding_errors="skip")
    with pytest.raises(SystemExit) as exit_info:
        prepare(["--source", "text", "--paths", str(tmp_path / "latin1.txt"), "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "latin1.txt' is not UTF-8 text" in capsys.readouterr().err


def test_an_empty_corpus_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    for source, name in (("text", "empty.txt"), ("jsonl", "blank.jsonl")):
        with pytest.raises(ValueError, match=rf"paths: \['.*{name}'\] hold no document"):
            text_source(DataConfig(source=source, paths=(str(tmp_path / name),)))
    (tmp_path / "empty_text.jsonl").write_text('{"text": ""}\n' * 3)  # trained on BOS/EOS alone
    with pytest.raises(ValueError, match=r"empty_text.jsonl'\] hold 3 records whose 'text' is empty text"):
        text_source(DataConfig(source="jsonl", paths=(str(tmp_path / "empty_text.jsonl"),)))
    (tmp_path / "some_text.jsonl").write_text('{"text": ""}\n{"text": "a"}\n')
    assert len(text_source(DataConfig(source="jsonl", paths=(str(tmp_path / "some_text.jsonl"),)))) == 2
    with pytest.raises(SystemExit) as exit_info:  # it wrote 0 shards and exited 0
        prepare(["--source", "text", "--paths", str(tmp_path / "empty.txt"), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "ccq-prepare-data: error: paths:" in err and "hold no document" in err
