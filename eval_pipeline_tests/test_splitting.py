import json

import pytest

from eval_pipeline.splitting import find_batch, list_drops, partition_key_for, split_drop


def test_demo02_splits_into_ten_batches_with_original_naming(corpora_dir, tmp_path):
    manifests = split_drop(corpora_dir / "dataeva" / "demo02.jsonl", tmp_path, 10)
    keys = [m.partition_key for m in manifests]
    assert keys == [f"demo02{i:02d}" for i in range(1, 11)]
    sizes = [len(m.lines) for m in manifests]
    assert sizes == [10] * 9 + [7]
    path, manifest = find_batch(tmp_path, "demo0210")
    assert path.name == "demo0210.jsonl" and len(path.read_text().splitlines()) == 7
    assert manifest.lines == list(range(91, 98))


def test_blank_lines_are_skipped_and_lines_map_back(tmp_path):
    drop = tmp_path / "in" / "my drop.v2.jsonl"
    drop.parent.mkdir()
    drop.write_bytes(b'{"a": 1}\n\n{"b": 2}\r\nnot json\n')
    manifests = split_drop(drop, tmp_path / "batches", 2)
    assert [m.partition_key for m in manifests] == ["my_drop_v201", "my_drop_v202"]
    assert [m.lines for m in manifests] == [[1, 3], [4]]
    path, _ = find_batch(tmp_path / "batches", "my_drop_v202")
    assert path.read_text() == "not json\n"


def test_non_line_formats_are_one_batch_and_bad_split_size_is_refused(tmp_path):
    drop = tmp_path / "tau.json"
    drop.write_text(json.dumps([{"x": 1}, {"x": 2}]))
    (m,) = split_drop(drop, tmp_path / "b", 1)
    assert m.partition_key == "tau01" and m.lines is None
    with pytest.raises(ValueError):
        split_drop(drop, tmp_path / "b", 0)


def test_list_drops_ignores_hidden_and_unknown_files(tmp_path):
    for name in ["a.jsonl", ".b.jsonl", "c.tmp", "d.txt"]:
        (tmp_path / name).write_text("x")
    assert [p.name for p in list_drops(tmp_path)] == ["a.jsonl", "d.txt"]
    assert list_drops(tmp_path / "missing") == []
    assert partition_key_for("...") == "drop"


def test_same_named_files_in_different_folders_get_distinct_batches(tmp_path):
    from eval_pipeline.splitting import unique_bases

    drops = [tmp_path / "q" / "x.json", tmp_path / "answers" / "x.json", tmp_path / "y.jsonl"]
    bases = unique_bases(drops)
    assert bases[drops[2]] == "y"
    assert bases[drops[0]] == "q_x" and bases[drops[1]] == "answers_x"
