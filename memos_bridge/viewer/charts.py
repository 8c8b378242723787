"""Small inline SVG charts, drawn on the server: no chart library, no script, nothing fetched from a CDN.

A day with no data is a gap in a line (not a zero, which would read as "nothing worked that day").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2")
WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 640, 180, 44, 26, 12


def _y_max(series: Mapping[str, Sequence[float | None]], fixed: float | None) -> float:
    if fixed is not None:
        return fixed
    values = [v for line in series.values() for v in line if v is not None]
    top = max(values, default=0.0)
    return top if top > 0 else 1.0


def _frame(labels: Sequence[str], top: float, percent: bool, title: str) -> list[str]:
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    for step in range(5):
        value = top * step / 4
        y = PAD_TOP + plot_h - plot_h * step / 4
        text = f"{value * 100:.0f}%" if percent else (f"{value:.0f}" if top >= 4 else f"{value:.1f}")
        parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - 4}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{PAD_LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{text}</text>')
    if labels:
        last = len(labels) - 1
        for index in sorted({0, len(labels) // 2, last}):
            x = _x(index, len(labels))
            label = escape(labels[index][5:])  # MM-DD
            anchor = "start" if index == 0 and last else ("end" if index == last and last else "middle")
            parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 8}" class="tick" text-anchor="{anchor}">{label}</text>')
    return parts


def _x(index: int, count: int) -> float:
    span = WIDTH - PAD_LEFT - 12
    return PAD_LEFT + 6 + (span * index / max(count - 1, 1))


def _y(value: float, top: float) -> float:
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    return PAD_TOP + plot_h - plot_h * min(value, top) / top


def line_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    percent: bool = False,
    y_max: float | None = None,
) -> str:
    """One polyline per series over the day labels; None values break the line."""
    top = _y_max(series, 1.0 if percent and y_max is None else y_max)
    parts = _frame(labels, top, percent, title)
    for color, (name, values) in zip(PALETTE * 4, series.items(), strict=False):
        runs: list[list[str]] = [[]]
        for index, value in enumerate(values):
            if value is None:
                runs.append([])
                continue
            runs[-1].append(f"{_x(index, len(values)):.1f},{_y(value, top):.1f}")
            parts.append(
                f'<circle cx="{_x(index, len(values)):.1f}" cy="{_y(value, top):.1f}" r="2.5" fill="{color}">'
                f"<title>{escape(name)} {escape(labels[index])}: {value * 100:.0f}%</title></circle>"
                if percent
                else f'<circle cx="{_x(index, len(values)):.1f}" cy="{_y(value, top):.1f}" r="2" fill="{color}">'
                f"<title>{escape(name)} {escape(labels[index])}: {value:g}</title></circle>"
            )
        for run in runs:
            if len(run) > 1:
                parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(run)}"/>')
    parts.append("</svg>")
    return "".join(parts) + legend(list(series))


def stacked_bars(labels: Sequence[str], series: Mapping[str, Sequence[int]], *, title: str) -> str:
    """Bars per day, one colour per series stacked (memories written per day, by kind)."""
    totals = [sum(values[i] for values in series.values()) for i in range(len(labels))]
    top = float(max(totals, default=0) or 1)
    parts = _frame(labels, top, False, title)
    slot = (WIDTH - PAD_LEFT - 12) / max(len(labels), 1)
    bar = max(slot * 0.7, 1.0)
    for index, label in enumerate(labels):
        base = 0.0
        for color, (name, values) in zip(PALETTE * 4, series.items(), strict=False):
            count = values[index]
            if not count:
                continue
            y_top, y_bottom = _y(base + count, top), _y(base, top)
            x = PAD_LEFT + 6 + slot * index + (slot - bar) / 2 - slot / 2 + slot / 2
            parts.append(
                f'<rect x="{x:.1f}" y="{y_top:.1f}" width="{bar:.1f}" height="{max(y_bottom - y_top, 0.5):.1f}" '
                f'fill="{color}"><title>{escape(name)} {escape(label)}: {count}</title></rect>'
            )
            base += count
    parts.append("</svg>")
    return "".join(parts) + legend(list(series))


def legend(names: Sequence[str]) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{color}"></i>{escape(name)}</span>'
        for color, name in zip(PALETTE * 4, names, strict=False)
    )
    return f'<div class="legend">{items}</div>'
