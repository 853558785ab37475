"""The learning-curve PNG figure: return and success rate side by side against env steps (matplotlib).

A run's ``learning_curve.png`` (:func:`llmgym.metrics.plot_learning_curve`) and a sweep's
``sweep_curves.png`` (:func:`llmgym.sweep.plot_sweep_curves`) draw their own curves into this one
frame: two panels, the same axes, grid and legend, written at 100 dpi.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

__all__ = ["CURVE_PANELS", "save_curve_figure"]

#: The two panels, left to right: the metric key and its axis label.
CURVE_PANELS: tuple[tuple[str, str], ...] = (("episode_return", "return"), ("success_rate", "success rate"))


def save_curve_figure(
    draw: Callable[[Any, str, str], str],
    png_path: str | Path,
    title: str = "",
    *,
    legend_size: Optional[str] = None,
) -> Path:
    """Draw the two panels of :data:`CURVE_PANELS` and write the figure to a PNG.

    Args:
        draw: ``draw(ax, key, label)`` plots metric ``key`` (its label ``label``) on the matplotlib
            axes ``ax`` and returns the y-axis label.
        png_path: Where to write the image.
        title: Figure title (e.g. the env id); none when empty.
        legend_size: The legends' font size (matplotlib's, e.g. ``"small"``); ``None`` for the default.

    Returns:
        The PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(10, 4))
    for ax, (key, label) in zip(axes, CURVE_PANELS):
        y_label = draw(ax, key, label)
        ax.set_xlabel("env steps")
        ax.set_ylabel(y_label)
        if key == "success_rate":
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=legend_size)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(png_path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
