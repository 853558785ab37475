"""Rewriting a JSON Lines log with only the records that stay (a resumed run's trim)."""

from __future__ import annotations

from llmgym.jsonl import json_lines, keep_records


def test_keep_records_rewrites_only_when_a_record_is_dropped(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"s": 1}\n{"s": 2}\n{"s": 3}\n')
    lines = json_lines(path.read_text())
    before = path.stat().st_mtime_ns
    assert keep_records(path, lines, lambda line: True, str) == 0
    assert path.stat().st_mtime_ns == before and sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]
    assert keep_records(path, lines, lambda line: line != '{"s": 2}', lambda line: line.upper()) == 1
    assert path.read_text() == '{"S": 1}\n{"S": 3}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]
