"""Issue 44, item 17: torn and malformed run files give llmgym report and sweep --combine one typed line, never a traceback.

A torn last line of ``metrics.jsonl`` (an append cut short: no newline after it) is left out with a
warning, as resume drops it; any other malformed line or file is a ``RunFileError`` naming the file
and the line.
"""

import json
import logging
import re

import pytest

from llmgym.cli import main
from tests.report.run_files import episode, metrics_lines, write_run, write_sweep


def test_a_torn_last_metrics_line_is_left_out_with_a_warning(tmp_path, capsys, caplog):
    run = write_run(tmp_path / "run", metrics_lines() + ['{"kind": "train", "env_st'], end="")
    with caplog.at_level(logging.WARNING):
        assert main(["report", str(run)]) == 0, capsys.readouterr().err
        assert (
            main(
                [
                    "sweep",
                    "--combine",
                    str(write_sweep(tmp_path / "sweep", [run])),
                    "--out",
                    str(tmp_path / "c"),
                ]
            )
            == 0
        )
    assert "torn last line 4 of" in caplog.text and str(run / "metrics.jsonl") in caplog.text
    summary = json.loads((tmp_path / "c" / "sweep.json").read_text())
    assert summary["runs"][0]["error"] is None and summary["runs"][0]["success_after"] == 0.75


BAD_METRICS = {
    "not JSON": ("{nope", r"metrics.jsonl:2 is not valid JSON"),
    "a list": ("[1, 2]", r"metrics.jsonl:2 holds a JSON list, not a metrics record"),
    "a string step": (
        '{"kind": "train", "env_steps": "8"}',
        r"metrics.jsonl:2 is not a metrics record \('env_steps' is '8'",
    ),
    "no kind": ('{"env_steps": 8}', r"metrics.jsonl:2 is not a metrics record \('kind' is None"),
    "a string rate": (
        '{"kind": "eval", "env_steps": 8, "label": "after", "success_rate": "<b>1</b>"}',
        r"metrics.jsonl:2 is not a metrics record \('success_rate' is '<b>1</b>', expected a finite number",
    ),
    "a nested value": (
        '{"kind": "train", "env_steps": 8, "x": {"a": 1}}',
        r"metrics.jsonl:2 is not a metrics record \('x' is a dict",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_METRICS))
def test_a_malformed_metrics_line_is_a_typed_error_naming_file_and_line(tmp_path, capsys, case):
    line, message = BAD_METRICS[case]
    lines = metrics_lines()
    run = write_run(tmp_path / "run", [lines[0], line, *lines[1:]])
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym report: error: ") and len(err.strip().splitlines()) == 1, err
    assert str(run) in err

    assert re.search(message, err), err
    assert not (run / "report.html").exists()
    # sweep --combine: the run is summarised as failed (exit status 1), its error naming the file and the line.
    sweep = write_sweep(tmp_path / "sweep", [run])
    assert main(["sweep", "--combine", str(sweep), "--out", str(tmp_path / "c")]) == 1
    assert "1 of 1 runs failed" in capsys.readouterr().err
    summary = json.loads((tmp_path / "c" / "sweep.json").read_text())
    assert re.search(message, summary["runs"][0]["error"]), summary["runs"][0]["error"]


BAD_EPISODES = {
    "not JSON": ("{nope", r"episodes.jsonl:2 is not valid JSON"),
    "a string episode": (
        json.dumps(episode(episode="<img src=x>")),
        r"episodes.jsonl:2 is not an episode record \(field 'episode'",
    ),
    "a string length": (
        json.dumps(episode(length="9")),
        r"episodes.jsonl:2 is not an episode record \(field 'length'",
    ),
    "an unknown field": (
        json.dumps(episode(extra=1)),
        r"episodes.jsonl:2 is not an episode record \(unknown field\(s\) \['extra'\]",
    ),
    "a missing field": (
        json.dumps({"label": "after"}),
        r"episodes.jsonl:2 is not an episode record \(missing field",
    ),
    "a bad step": (
        json.dumps(
            episode(steps=[{"observation": 1, "action": "a", "reward": 0, "value": 0, "log_prob": 0}])
        ),
        r"episodes.jsonl:2 is not an episode record \(field 'observation'",
    ),
    "steps not a list": (
        json.dumps(episode(steps="x")),
        r"episodes.jsonl:2 is not an episode record \('steps' must be a list",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_EPISODES))
def test_a_malformed_episode_line_is_a_typed_error_naming_file_and_line(tmp_path, capsys, case):
    line, message = BAD_EPISODES[case]
    run = write_run(tmp_path / "run", episodes=[json.dumps(episode()), line])
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err

    assert err.startswith("llmgym report: error: ") and re.search(message, err), err
    assert not (run / "report.html").exists()


BAD_CONFIGS = {
    "not YAML": ("env: [", "config.yaml is not valid YAML"),
    "a list": ("- a\n- b\n", "config.yaml holds a list, not a config mapping"),
    "a section": ("env: llmgym/Countdown-v0\n", "config.yaml: 'env' is not a mapping"),
    "a seed": ("train:\n  seed: abc\n", "config.yaml: train.seed is 'abc', not an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_malformed_config_is_a_typed_error(tmp_path, capsys, case):
    text, message = BAD_CONFIGS[case]
    run = write_run(tmp_path / "run", config=text)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym report: error: ") and message in err, err


@pytest.mark.parametrize(
    "text", ["{", "[1]", '{"runs": [{"seed": 0}]}', '{"runs": [{"run_dir": "r", "seed": 0, "threads": "x"}]}']
)
def test_a_malformed_sweep_summary_is_a_typed_error(tmp_path, capsys, text):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(text)
    assert main(["sweep", "--combine", str(sweep), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym sweep: error: ") and "is not a sweep summary" in err, err
    if "threads" not in text:
        assert main(["report", str(sweep)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmgym report: error: ") and "is not a sweep summary" in err, err
