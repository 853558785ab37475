"""Issue 44, item 2: llmgym report --out never replaces a run file, nor any file that is not a previous report."""

import pytest

from llmgym.cli import main
from llmgym.report.html import REPORT_NAME, is_report
from tests.report.run_files import write_run, write_sweep


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "name", ["metrics.jsonl", "config.yaml", "episodes.jsonl", "checkpoints/step-1/x.html"]
)
def test_out_never_writes_a_run_file(tmp_path, capsys, name):
    run = write_run(tmp_path / "run", episodes=[])
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    before = _files(run)
    assert main(["report", str(run), "--out", str(run / name)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"llmgym report: error: --out {run / name} ") and "give --out a new file name" in err
    )
    assert _files(run) == before  # metrics.jsonl still holds the metrics, nothing was added


def test_out_in_a_sweep_folder_never_replaces_its_summary(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "sweep", [write_run(tmp_path / "sweep" / "seed-0")])
    before = _files(sweep)
    assert main(["report", str(sweep), "--out", str(sweep / "sweep.json")]) == 2
    assert "is the run file sweep.json" in capsys.readouterr().err
    assert _files(sweep) == before


def test_out_never_replaces_a_file_that_is_not_a_report(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    mine = tmp_path / "notes.html"
    mine.write_text("<!DOCTYPE html><p>my notes</p>")
    assert main(["report", str(run), "--out", str(mine)]) == 2
    assert "exists and is not a report that llmgym report wrote" in capsys.readouterr().err
    assert mine.read_text() == "<!DOCTYPE html><p>my notes</p>"


def test_out_a_folder_writes_report_html_in_it_and_a_previous_report_is_replaced(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    folder = tmp_path / "reports"
    folder.mkdir()
    assert main(["report", str(run), "--out", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {folder / REPORT_NAME}"
    assert is_report(folder / REPORT_NAME)
    assert main(["report", str(run), "--out", str(folder)]) == 0  # its own previous report: replaced
    assert main(["report", str(run)]) == 0 and is_report(run / REPORT_NAME)  # the default place, twice
    assert main(["report", str(run)]) == 0


def test_a_report_of_an_older_llmgym_is_recognised_by_its_footer(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    older = tmp_path / "older.html"
    older.write_text(
        '<!DOCTYPE html><html><head><style></style></head><body><header><p class="muted">generated '
        "2026-01-01 00:00:00 by llmgym report</p></header></body></html>"
    )
    assert main(["report", str(run), "--out", str(older)]) == 0
    assert is_report(older) and "generated 2026-01-01" not in older.read_text()
