"""Inline SVG charts of the run report: line charts (curves, evaluations, bands) and stacked bars.

Pure string building, no plotting library, so the report stays one self-contained text file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Optional

__all__ = ["PALETTE", "Series", "Band", "line_chart", "stacked_bars"]

#: Colours of successive series (colour-blind-safe, Okabe-Ito order).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 52, 12, 30, 52
#: Points drawn per line at most (longer lines are thinned evenly, the last point kept).
MAX_LINE_POINTS = 1000
#: Pixels per character at most of the title (13 px, bold) and the legend (11 px), and their line heights:
#: an upper bound for the sans-serif fonts browsers pick (DejaVu Sans Bold, the widest common one,
#: averages 0.63 em), so the laid-out text never passes the chart's right edge.
_TITLE_CHAR, _LEGEND_CHAR = 9.0, 7.5
_TITLE_LINE, _LEGEND_LINE = 16, 16
_TEXT_RIGHT = 6


@dataclass
class Series:
    """One series of a line chart.

    Attributes:
        name: Legend label.
        xs: X values.
        ys: Y values (``None`` leaves a gap).
        color: Stroke colour.
        markers: Draw a dot at each point.
        line: Join the points.
        dashed: Dashed line.
        width: Stroke width.
    """

    name: str
    xs: Sequence[float]
    ys: Sequence[Optional[float]]
    color: str = PALETTE[0]
    markers: bool = False
    line: bool = True
    dashed: bool = False
    width: float = 1.8


@dataclass
class Band:
    """A shaded horizontal band (an interval) with a line at its centre.

    Attributes:
        name: Legend label.
        low: Lower end.
        high: Upper end.
        centre: The line inside the band.
        color: Fill colour.
    """

    name: str
    low: float
    high: float
    centre: float
    color: str = PALETTE[0]


@dataclass
class _Frame:
    x0: float
    x1: float
    y0: float
    y1: float
    width: int
    height: int
    top: float = _MARGIN_TOP
    bottom: float = _MARGIN_BOTTOM
    xs: list[float] = field(default_factory=list)

    def px(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return _MARGIN_LEFT + (x - self.x0) / span * (self.width - _MARGIN_LEFT - _MARGIN_RIGHT)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - self.bottom - (y - self.y0) / span * (self.height - self.top - self.bottom)


def _wrap(text: str, width: float, char_px: float) -> list[str]:
    """``text`` in lines of at most ``width`` pixels at ``char_px`` per character (long words cut)."""
    per_line = max(1, int(width / char_px))
    lines: list[str] = []
    for word in text.split(" "):
        while len(word) > per_line:
            if lines and len(lines[-1]) + 1 < per_line:
                room = per_line - len(lines[-1]) - 1
                lines[-1] += " " + word[:room]
                word = word[room:]
            else:
                lines.append(word[:per_line])
                word = word[per_line:]
        if lines and len(lines[-1]) + 1 + len(word) <= per_line:
            lines[-1] += " " + word
        elif word or not lines:
            lines.append(word)
    return lines


def _title_lines(title: str, width: int) -> list[str]:
    return _wrap(title, width - _MARGIN_LEFT - _TEXT_RIGHT, _TITLE_CHAR)


def _legend_rows(entries: list[tuple[str, str, str]], width: int) -> list[list[tuple[float, str, str, str]]]:
    """The legend's entries placed left to right, a new row where the next would pass the right edge.

    Returns:
        Per row, ``(x, name, colour, style)`` per entry (style ``solid``, ``dashed`` or ``point``) (an entry too long for a row is wrapped by
        :func:`_legend` into several lines of its own).
    """
    rows: list[list[tuple[float, str, str, str]]] = [[]]
    x = float(_MARGIN_LEFT)
    for name, color, style in entries:
        span = 20 + _LEGEND_CHAR * len(name)
        if rows[-1] and x + span > width - _TEXT_RIGHT:
            rows.append([])
            x = float(_MARGIN_LEFT)
        rows[-1].append((x, name, color, style))
        x += span + 8
    return rows if rows[-1] else rows[:-1]


def _legend_lines(rows: list[list[tuple[float, str, str, str]]], width: int) -> list[int]:
    """Lines of text each legend row takes (more than one where a lone entry is too long)."""
    return [
        max(
            (len(_wrap(name, width - x - 20 - _TEXT_RIGHT, _LEGEND_CHAR)) for x, name, _, _ in row), default=1
        )
        for row in rows
    ]


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if m * step >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _label(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1e6:.3g}M" if abs(value) >= 1e6 else f"{value / 1e3:.3g}k"
    if value != 0 and abs(value) < 0.01:
        return f"{value:.3g}"
    return f"{value:.10g}" if float(value).is_integer() else f"{value:.3g}"


def _thin(xs: Sequence[float], ys: Sequence[Optional[float]]) -> list[tuple[float, Optional[float]]]:
    points = list(zip(xs, ys))
    if len(points) <= MAX_LINE_POINTS:
        return points
    stride = len(points) / MAX_LINE_POINTS
    kept = [points[int(i * stride)] for i in range(MAX_LINE_POINTS)]
    return [*kept[:-1], points[-1]]


def _path(frame: _Frame, points: list[tuple[float, Optional[float]]]) -> str:
    parts, pen_down = [], False
    for x, y in points:
        if y is None or not math.isfinite(y):
            pen_down = False
            continue
        parts.append(f"{'L' if pen_down else 'M'}{frame.px(x):.1f},{frame.py(y):.1f}")
        pen_down = True
    return "".join(parts)


def _title(title: str, width: int) -> str:
    """The title's ``<text>``, a ``<tspan>`` per line."""
    lines = _title_lines(title, width)
    spans = "".join(
        f'<tspan x="{_MARGIN_LEFT}" dy="{0 if i == 0 else _TITLE_LINE}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return f'<text class="title" x="{_MARGIN_LEFT}" y="16">{spans}</text>'


def _layout(
    title: str, entries: list[tuple[str, str, str]], width: int, height: int
) -> tuple[float, float, int]:
    """The top and bottom margins and the total height: room for the title's and the legend's lines."""
    extra_top = _TITLE_LINE * (len(_title_lines(title, width)) - 1)
    extra_bottom = (
        _LEGEND_LINE * (sum(_legend_lines(_legend_rows(entries, width), width)) - 1) if entries else 0
    )
    return _MARGIN_TOP + extra_top, _MARGIN_BOTTOM + extra_bottom, height + extra_top + extra_bottom


def _axes(frame: _Frame, title: str, x_label: str, y_label: str) -> list[str]:
    out = [_title(title, frame.width)]
    for y in _ticks(frame.y0, frame.y1):
        py = frame.py(y)
        out.append(
            f'<line class="grid" x1="{_MARGIN_LEFT}" x2="{frame.width - _MARGIN_RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{_MARGIN_LEFT - 4}" y="{py + 3:.1f}" text-anchor="end">{_label(y)}</text>'
        )
    for x in _ticks(frame.x0, frame.x1):
        px = frame.px(x)
        out.append(
            f'<text class="tick" x="{px:.1f}" y="{frame.height - frame.bottom + 14}" text-anchor="middle">{_label(x)}</text>'
        )
    bottom = frame.height - frame.bottom
    out.append(
        f'<line class="axis" x1="{_MARGIN_LEFT}" x2="{frame.width - _MARGIN_RIGHT}" y1="{bottom}" y2="{bottom}"/>'
    )
    out.append(
        f'<text class="axis-label" x="{(frame.width + _MARGIN_LEFT) / 2:.0f}" y="{bottom + 28}" text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text class="axis-label" transform="translate(12,{(frame.height - frame.bottom + frame.top) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    return out


def _legend(frame: _Frame, entries: list[tuple[str, str, str]]) -> list[str]:
    """The legend under the plot, in as many rows (and lines) as the chart's width needs."""
    rows = _legend_rows(entries, frame.width)
    out = []
    y = frame.height - frame.bottom + 44
    for row, lines in zip(rows, _legend_lines(rows, frame.width)):
        for x, name, color, style in row:
            if style == "point":
                out.append(f'<circle cx="{x + 8:.0f}" cy="{y - 4}" r="3.5" fill="{color}"/>')
            else:
                dash = ' stroke-dasharray="5,3"' if style == "dashed" else ""
                out.append(
                    f'<line x1="{x:.0f}" x2="{x + 16:.0f}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" stroke-width="2.5"{dash}/>'
                )
            parts = _wrap(name, frame.width - x - 20 - _TEXT_RIGHT, _LEGEND_CHAR) if len(row) == 1 else [name]
            spans = "".join(
                f'<tspan x="{x + 20:.0f}" dy="{0 if i == 0 else _LEGEND_LINE}">{escape(part)}</tspan>'
                for i, part in enumerate(parts)
            )
            out.append(f'<text class="legend" x="{x + 20:.0f}" y="{y}">{spans}</text>')
        y += _LEGEND_LINE * lines
    return out


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str = "env steps",
    y_label: str = "",
    y_range: Optional[tuple[float, float]] = None,
    bands: Sequence[Band] = (),
    hlines: Sequence[tuple[str, float, str]] = (),
    width: int = 480,
    height: int = 280,
) -> str:
    """An SVG line chart.

    Args:
        series: The lines and point sets.
        title: Title above the plot.
        x_label: X axis label.
        y_label: Y axis label.
        y_range: Fixed y range; default the data's, padded.
        bands: Shaded horizontal intervals (e.g. an IQM's confidence interval).
        hlines: Dashed horizontal reference lines ``(name, y, colour)`` (e.g. the zero-shot result).
        width: Width in pixels.
        height: Height in pixels.

    Returns:
        An ``<svg>`` element.
    """
    xs = [float(x) for s in series for x in s.xs] or [0.0, 1.0]
    ys: list[float] = [float(y) for s in series for y in s.ys if y is not None and math.isfinite(y)]
    ys += [v for b in bands for v in (b.low, b.high)] + [y for _, y, _ in hlines]
    if y_range is None:
        low, high = (min(ys), max(ys)) if ys else (0.0, 1.0)
        pad = (high - low) * 0.05 or 0.5
        y_range = (low - pad, high + pad)
    legend: list[tuple[str, str, str]] = [(band.name, band.color, "solid") for band in bands]
    legend += [(name, color, "dashed") for name, _, color in hlines]
    legend += [
        (s.name, s.color, ("dashed" if s.dashed else "solid") if s.line else "point")
        for s in series
        if s.name
    ]
    top, bottom, height = _layout(title, legend, width, height)
    frame = _Frame(
        min(xs),
        max(xs) if max(xs) > min(xs) else min(xs) + 1,
        y_range[0],
        y_range[1],
        width,
        height,
        top=top,
        bottom=bottom,
    )
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    out += _axes(frame, title, x_label, y_label)
    left, right = _MARGIN_LEFT, width - _MARGIN_RIGHT
    for band in bands:
        band_top, band_bottom = frame.py(band.high), frame.py(band.low)
        out.append(
            f'<rect x="{left}" y="{band_top:.1f}" width="{right - left}" height="{max(1.0, band_bottom - band_top):.1f}" fill="{band.color}" opacity="0.15"/>'
        )
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{frame.py(band.centre):.1f}" y2="{frame.py(band.centre):.1f}" stroke="{band.color}" stroke-width="2"/>'
        )
    for _, level, color in hlines:
        out.append(
            f'<line x1="{left}" x2="{right}" y1="{frame.py(level):.1f}" y2="{frame.py(level):.1f}" stroke="{color}" stroke-width="1.5" stroke-dasharray="6,4"/>'
        )
    for s in series:
        points = _thin(s.xs, s.ys)
        dash = ' stroke-dasharray="5,3"' if s.dashed else ""
        if s.line:
            out.append(
                f'<path d="{_path(frame, points)}" fill="none" stroke="{s.color}" stroke-width="{s.width}"{dash}><title>{escape(s.name)}</title></path>'
            )
        if s.markers:
            for x, y in points:
                if y is not None and math.isfinite(y):
                    out.append(
                        f'<circle cx="{frame.px(x):.1f}" cy="{frame.py(y):.1f}" r="3.5" fill="{s.color}"><title>{escape(s.name)}: {_label(y)} at {_label(x)}</title></circle>'
                    )
    out += _legend(frame, legend)
    out.append("</svg>")
    return "".join(out)


def stacked_bars(
    columns: Sequence[tuple[str, dict[str, float]]],
    *,
    title: str,
    width: int = 720,
    height: int = 300,
) -> str:
    """An SVG of stacked bars: per column, the share of each category (e.g. action probabilities).

    Args:
        columns: ``(label, {category: share})`` per bar, shares summing to at most 1.
        title: Title above the plot.
        width: Width in pixels.
        height: Height in pixels.

    Returns:
        An ``<svg>`` element; categories are coloured in first-seen order.
    """
    categories = list(dict.fromkeys(c for _, shares in columns for c in shares))
    colors = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(categories)}
    legend = [(c, colors[c], "solid") for c in categories]
    top, bottom, height = _layout(title, legend, width, height)
    frame = _Frame(0, max(1, len(columns)), 0.0, 1.0, width, height, top=top, bottom=bottom)
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    out.append(_title(title, width))
    for y in _ticks(0.0, 1.0):
        py = frame.py(y)
        out.append(
            f'<line class="grid" x1="{_MARGIN_LEFT}" x2="{width - _MARGIN_RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{_MARGIN_LEFT - 4}" y="{py + 3:.1f}" text-anchor="end">{_label(y)}</text>'
        )
    slot = (width - _MARGIN_LEFT - _MARGIN_RIGHT) / max(1, len(columns))
    for i, (label, shares) in enumerate(columns):
        x = _MARGIN_LEFT + i * slot + slot * 0.15
        base = 0.0
        for category in categories:
            share = shares.get(category, 0.0)
            if share <= 0:
                continue
            bar_top, bar_bottom = frame.py(base + share), frame.py(base)
            out.append(
                f'<rect x="{x:.1f}" y="{bar_top:.1f}" width="{slot * 0.7:.1f}" height="{bar_bottom - bar_top:.1f}" fill="{colors[category]}">'
                f"<title>{escape(label)}: {escape(category)} {share:.3f}</title></rect>"
            )
            base += share
        if len(columns) <= 20 or i % max(1, len(columns) // 10) == 0:
            out.append(
                f'<text class="tick" x="{x + slot * 0.35:.1f}" y="{height - bottom + 14}" text-anchor="middle">{escape(label)}</text>'
            )
    out += _legend(frame, legend)
    out.append("</svg>")
    return "".join(out)
