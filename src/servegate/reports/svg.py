"""Inline SVG plots for the HTML report: no script, no library, no network.

Each plot draws only numbers it is given and says so when it has none. Text in a plot (tooltips,
labels) is escaped here, once. Colours come from classes in the page's stylesheet, so the
page's Content-Security-Policy needs no inline style attributes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from servegate.reports.plain import plain

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44


def _esc(value: object) -> str:
    return escape(plain(value, one_line=True), quote=True)


@dataclass(frozen=True)
class _Axis:
    low: float
    high: float
    start: float
    end: float

    def at(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) / span * (self.end - self.start)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    span = high - low
    if span <= 0:
        return [low]
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if raw <= m * step)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _frame(x: _Axis, y: _Axis, x_label: str, y_label: str, title: str) -> list[str]:
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{_esc(title)}">',
        f"<title>{_esc(title)}</title>",
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" '
        f'y2="{HEIGHT - BOTTOM}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}"/>',
    ]
    for t in _ticks(x.low, x.high):
        px = x.at(t)
        out.append(
            f'<line class="grid" x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM}"/>'
        )
        out.append(
            f'<text class="tick" x="{px:.1f}" y="{HEIGHT - BOTTOM + 14}" '
            f'text-anchor="middle">{t:g}</text>'
        )
    for t in _ticks(y.low, y.high):
        py = y.at(t)
        out.append(
            f'<line class="grid" x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{t:g}</text>'
        )
    out.append(
        f'<text class="label" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" '
        f'text-anchor="middle">{_esc(x_label)}</text>'
    )
    out.append(
        f'<text class="label" x="14" y="{(TOP + HEIGHT - BOTTOM) / 2}" '
        f'text-anchor="middle" transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})">'
        f"{_esc(y_label)}</text>"
    )
    return out


def latency_cdf(samples_ms: Mapping[str, Sequence[float]], *, title: str) -> str | None:
    """Empirical CDF of latencies per side (a step line each); None when there is no sample."""
    series = {
        side: sorted(v for v in values if math.isfinite(v)) for side, values in samples_ms.items()
    }
    series = {side: values for side, values in series.items() if values}
    if not series:
        return None
    high = max(v[-1] for v in series.values())
    x = _Axis(0.0, high * 1.05 or 1.0, LEFT, WIDTH - RIGHT)
    y = _Axis(0.0, 1.0, HEIGHT - BOTTOM, TOP)
    out = _frame(x, y, "latency (ms)", "share of requests ≤ x", title)
    for i, (side, values) in enumerate(series.items()):
        n = len(values)
        points = [f"{x.at(0):.1f},{y.at(0):.1f}"]
        for k, v in enumerate(values):
            points += [f"{x.at(v):.1f},{y.at(k / n):.1f}", f"{x.at(v):.1f},{y.at((k + 1) / n):.1f}"]
        css = f"series{i % 3}"
        out.append(
            f'<polyline class="{css}" points="{" ".join(points)}"><title>{_esc(side)}: '
            f"{n} requests</title></polyline>"
        )
        ly = TOP + 14 + 16 * i
        out.append(
            f'<line class="{css}" x1="{WIDTH - 170}" y1="{ly - 4}" x2="{WIDTH - 150}" '
            f'y2="{ly - 4}"/><text class="tick" x="{WIDTH - 144}" y="{ly}">'
            f"{_esc(side)} (n={n})</text>"
        )
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class DriftPoint:
    """One divergence on the plot: the baseline's margin there and the candidate token's gap."""

    label: str
    margin_nats: float
    gap_nats: float
    blocking: bool


def drift_plot(
    points: Sequence[DriftPoint], *, near_tie_nats: float | None, title: str
) -> str | None:
    """Gap against margin per divergence: near-tie flips sit at the origin, confident ones far
    right; the gate's near-tie limit is drawn when known. None when no point has both numbers."""
    usable = [p for p in points if math.isfinite(p.margin_nats) and math.isfinite(p.gap_nats)]
    if not usable:
        return None
    top = (
        max(
            max(p.margin_nats for p in usable),
            max(p.gap_nats for p in usable),
            near_tie_nats or 0.0,
            0.1,
        )
        * 1.1
    )
    x = _Axis(0.0, top, LEFT, WIDTH - RIGHT)
    y = _Axis(0.0, top, HEIGHT - BOTTOM, TOP)
    out = _frame(
        x, y, "baseline top-1 − top-2 margin (nats)", "gap to the candidate's token (nats)", title
    )
    if near_tie_nats is not None and near_tie_nats > 0:
        px = x.at(near_tie_nats)
        out.append(
            f'<line class="limit" x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" '
            f'y2="{HEIGHT - BOTTOM}"><title>near-tie limit {near_tie_nats:g} nats'
            "</title></line>"
        )
    for p in usable:
        css = "point-blocking" if p.blocking else "point"
        out.append(
            f'<circle class="{css}" cx="{x.at(p.margin_nats):.1f}" '
            f'cy="{y.at(p.gap_nats):.1f}" r="5"><title>{_esc(p.label)}: margin '
            f"{p.margin_nats:.3g}, gap {p.gap_nats:.3g} nats</title></circle>"
        )
    out.append("</svg>")
    return "\n".join(out)
