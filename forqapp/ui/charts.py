"""Server-side SVG charts: a queue's depth over the last 24 hours, as inline SVG (no JS)."""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe


def _points(values: Sequence[int | None], width: float, height: float, top: int, pad: float) -> list[str]:
    n = len(values)
    step = width / max(n - 1, 1)
    usable = height - 2 * pad
    return [
        f"{i * step:.1f},{pad + usable - (v / top) * usable:.1f}"
        for i, v in enumerate(values)
        if v is not None
    ]


def sparkline(series: Sequence[Sequence[int | None] | None], *, label: str, width: int = 160,
              height: int = 36, classes: Sequence[str] = ("line-queue", "line-dlq")) -> SafeString:
    """A small line chart of one or more series (same length), scaled to their common maximum."""
    lines = [(s, c) for s, c in zip(series, classes, strict=False) if s and any(v is not None for v in s)]
    if not lines:
        return format_html(
            '<svg class="spark spark-empty" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            'aria-label="{label}: no history yet"><line x1="0" y1="{y}" x2="{w}" y2="{y}"/></svg>',
            w=width, h=height, y=height - 2, label=label,
        )
    top = max(max((v or 0) for v in s) for s, _ in lines) or 1
    paths = []
    for values, css in lines:
        pts = _points(values, width, height, top, 2)
        first_x = pts[0].split(",")[0]
        last_x = pts[-1].split(",")[0]
        area = f"M{first_x},{height} L" + " L".join(pts) + f" L{last_x},{height} Z"
        paths.append((css, area, " ".join(pts)))
    body = format_html_join(
        "", '<path class="{} area" d="{}"/><polyline class="{}" points="{}"/>',
        ((c, a, c, p) for c, a, p in paths),
    )
    latest = [next((v for v in reversed(s) if v is not None), 0) for s, _ in lines]
    return format_html(
        '<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" preserveAspectRatio="none" '
        'role="img" aria-label="{label}"><title>{label}: max {top}, now {now} (last 24 h)</title>{body}</svg>',
        w=width, h=height, label=label, top=top, now=" / ".join(map(str, latest)), body=body,
    )


def collecting(label: str, when: str) -> SafeString:
    """The 24-hour column before a line can be drawn: it says so, and ``when`` one comes."""
    return format_html(
        '<span class="collecting" data-testid="collecting" title="{label}: the queue-depth job keeps one sample '
        'per 5 minutes">collecting · {when}</span>', label=label, when=when)


def chart(values: Sequence[int | None] | None, *, label: str, width: int = 720, height: int = 160,
          css: str = "line-queue", minutes: int = 5) -> SafeString:
    """A larger chart for a queue page: the line, its maximum and the time axis (24 h ago → now)."""
    if not values or sum(v is not None for v in values) < 2:  # a line needs two samples
        return format_html('<p class="muted chart-empty" data-testid="collecting" title="{}">Collecting depth '
                           "history: the queue-depth job keeps one sample of every queue per 5 minutes, and "
                           "the chart draws from the second (in about {} min).</p>", label, minutes)
    top = max(v or 0 for v in values) or 1
    plot_h = height - 22
    pts = _points(values, width, plot_h, top, 4)
    first_x = pts[0].split(",")[0]
    last_x = pts[-1].split(",")[0]
    area = f"M{first_x},{plot_h} L" + " L".join(pts) + f" L{last_x},{plot_h} Z"
    grid = mark_safe("".join(  # noqa: S308 - numbers only
        f'<line class="grid" x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}"/>'
        for y in (4, 4 + (plot_h - 8) / 2, plot_h - 4)
    ))
    ticks = format_html_join(
        "", '<text class="tick" x="{}" y="{}" text-anchor="{}">{}</text>',
        ((x, height - 4, a, t) for x, a, t in ((0, "start", "24 h ago"), (width / 2, "middle", "12 h ago"),
                                                (width, "end", "now"))),
    )
    return format_html(
        '<svg class="chart" viewBox="0 0 {w} {h}" preserveAspectRatio="none" role="img" aria-label="{label}">'
        "<title>{label}</title>{grid}"
        '<path class="{css} area" d="{area}"/><polyline class="{css}" points="{pts}"/>'
        '<text class="tick top" x="4" y="14">{top}</text>{ticks}</svg>',
        w=width, h=height, label=label, grid=grid, css=css, area=area, pts=" ".join(pts), top=top,
        ticks=ticks,
    )
