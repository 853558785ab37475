"""The learning-curve figure shared by a run's and a sweep's PNG."""

from __future__ import annotations

from llmgym.report.figures import CURVE_PANELS, save_curve_figure


def test_each_panel_is_drawn_labelled_and_written(tmp_path):
    drawn = []

    def draw(ax, key, label):
        drawn.append((key, label))
        ax.plot([0, 10], [0.0, 1.0], "-", label="curve")
        return f"{label} (test)"

    png = save_curve_figure(draw, tmp_path / "curves.png", title="t", legend_size="small")
    assert png == tmp_path / "curves.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == list(CURVE_PANELS) == [("episode_return", "return"), ("success_rate", "success rate")]
