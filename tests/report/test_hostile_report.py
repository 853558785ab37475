"""Issue 44, item 9: hostile strings in every recorded field never run as script in the report.

The report is loaded in headless Chromium; each payload, had it run, would mark the page (a
``data-pwned`` attribute on ``<body>`` or the title ``PWNED``).
"""

import json
import re

import pytest

from llmgym.cli import main
from llmgym.report.html import build_html
from llmgym.report.records import EpisodeRecord, StepRecord
from llmgym.report.runs import RunData
from tests.report.browser import chromium, dump_dom
from tests.report.run_files import episode, metrics_lines, write_run

PAYLOADS = [
    "<img src=x onerror=document.body.dataset.pwned=1>",
    "</script><script>document.body.dataset.pwned=2</script>",
    '"><svg onload=document.body.dataset.pwned=3>',
    "' onmouseover='document.body.dataset.pwned=4' x='",
    "</title><script>document.title='PWNED'</script>",
    '</pre><iframe srcdoc="<script>parent.document.body.dataset.pwned=5</script>"></iframe>',
]


def hostile(index: int) -> str:
    return f"{PAYLOADS[index % len(PAYLOADS)]} #{index}"


def assert_no_script_ran(dom: str) -> None:
    body = re.search(r"<body[^>]*>", dom)
    assert body is not None and "pwned" not in body.group(0), body.group(0)
    assert "<title>PWNED" not in dom
    assert not re.search(r"<(img|svg|iframe)\b[^>]*(onerror|onload|srcdoc)", dom), (
        "a payload became an element"
    )
    assert 'data-replay-ready="1"' in dom, "the replay script itself ran"


def hostile_episodes(count):
    """Episodes whose every string field (and every step's) holds a payload."""
    n = iter(range(1000))
    records = []
    for index in range(count):
        steps = episode()["steps"]
        for step in steps:
            for key in ("observation", "action", "text"):
                if key in step:
                    step[key] = hostile(next(n))
            for key in ("candidates", "tokens"):
                if key in step:
                    step[key] = [hostile(next(n)) for _ in step[key]]
        records.append(episode(episode=index, label=hostile(next(n)), policy=hostile(next(n)), steps=steps))
    return records


def test_hostile_strings_in_every_recorded_field_stay_text(tmp_path, capsys):
    chromium()
    name = "run<img src=x onerror=document.body.dataset.pwned=9>"
    config = (
        f"env:\n  id: {json.dumps(hostile(100))}\nagent:\n  type: {json.dumps(hostile(101))}\n"
        f"train:\n  seed: 0\n  note: {json.dumps(hostile(102))}\n"
    )
    metrics = [json.loads(line) for line in metrics_lines()]
    for index, record in enumerate(metrics):
        record["label" if record["kind"] == "eval" else "note"] = hostile(200 + index)
        record["extra"] = hostile(300 + index)
    records = hostile_episodes(2)
    run = write_run(
        tmp_path / name, [json.dumps(m) for m in metrics], [json.dumps(r) for r in records], config
    )
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    report = run / "report.html"
    text = report.read_text()
    for payload in PAYLOADS:  # in the HTML only escaped (the embedded JSON escapes every "<")
        assert "<" not in payload or payload not in text
    for fragment in ("", "r=0&e=1&k=0&p=0&s=0", "r=0&e=1&k=0&p=0&s=1", "r=0&e=1&k=0&p=1&s=1"):
        dom = dump_dom(report, fragment)
        assert_no_script_ran(dom)
    assert "#1 " in dom or "&lt;img" in dom  # the hostile texts are shown, as text


def test_the_replay_escapes_even_values_of_the_wrong_type(tmp_path):
    """The records are read with their types checked; the replay's script escapes every value anyway."""
    chromium()
    bad = "<img src=x onerror=document.body.dataset.pwned=7>"
    step = StepRecord(
        observation="o",
        action="a",
        reward=bad,
        value=None,
        log_prob=None,  # type: ignore[arg-type]
        candidates=["x"],
        probs=[bad],
        chosen=0,  # type: ignore[list-item]
    )
    generated = StepRecord(
        observation="o",
        action="a",
        reward=0.0,
        value=None,
        log_prob=None,
        text="t",
        tokens=["t"],
        token_log_probs=[bad],  # type: ignore[list-item]
    )
    record = EpisodeRecord(
        env_steps=bad,
        label="l",
        evaluation=0,
        episode=bad,
        seed=bad,
        policy="sampled",  # type: ignore[arg-type]
        episode_return=bad,
        success=True,
        length=bad,
        steps=[step, generated],  # type: ignore[arg-type]
    )
    run = RunData(name="r", path=tmp_path, config_yaml="", config={}, episodes=[record])
    report = tmp_path / "report.html"
    report.write_text(build_html([run]), encoding="utf-8")
    for fragment in ("", "r=0&e=0&k=1&p=0&s=1"):
        assert_no_script_ran(dump_dom(report, fragment))


@pytest.mark.parametrize("field", ["episode", "length", "seed", "env_steps"])
def test_a_hostile_number_field_is_refused_when_read(tmp_path, capsys, field):
    run = write_run(tmp_path / "run", episodes=[json.dumps(episode(**{field: PAYLOADS[0]}))])
    assert main(["report", str(run)]) == 2
    assert f"episodes.jsonl:1 is not an episode record (field '{field}'" in capsys.readouterr().err
