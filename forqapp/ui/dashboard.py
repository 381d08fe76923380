"""The dashboard's table: a page of queues, whatever their number.

Every queue is counted (the cards' totals need them all, and the store counts them in one grouped
read), but the page lists :data:`PER_PAGE` of them at a time: the busiest first (messages in the
queue and its DLQ), or those with the most dead letters, or by name; a search narrows the list by
name. Only the listed queues' 24-hour charts are read and drawn, so the page and its 5-second
refresh stay a few tens of KB with ten thousand queues as with ten.

A dead-letter queue holding messages is listed under its queue, as a row of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Paginator

from ..services import history
from . import charts, queries

PER_PAGE = 25
SEARCH_MAX = 80  # a queue name is at most 80 characters
SORTS = {
    "depth": "most messages",
    "dlq": "most dead letters",
    "name": "name",
}
DEFAULT_SORT = "depth"
BUCKETS = 96  # points of a 24-hour sparkline: one per 15 minutes


@dataclass(frozen=True)
class Listing:
    """What the table shows: ``?q=`` (search), ``?sort=``, ``?page=``, parsed once."""

    q: str = ""
    sort: str = DEFAULT_SORT
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Listing:
        """Anything unknown falls back to the default (a bookmark from an older page still opens)."""
        q = (params.get("q") or "").strip()[:SEARCH_MAX]
        sort = params.get("sort") or DEFAULT_SORT
        try:
            page = max(1, int(params.get("page") or 1))
        except ValueError:
            page = 1
        return cls(q=q, sort=sort if sort in SORTS else DEFAULT_SORT, page=min(page, 10**6))

    def query(self, **changes: object) -> str:
        """The query string of this listing with ``changes`` (defaults left out): ``""`` or ``?…``."""
        values = {**dataclasses.asdict(self), **changes}
        pairs = [(k, v) for k, v in values.items() if v and v != dataclasses.asdict(Listing())[k]]
        return "?" + urlencode(pairs) if pairs else ""


def _key(sort: str):
    if sort == "name":
        return lambda r: r.name
    if sort == "dlq":
        return lambda r: (-r.dlq.total, -r.queue.total, r.name)
    return lambda r: (-(r.queue.total + r.dlq.total), r.name)


def _matches(row: queries.QueueRow, q: str) -> bool:
    q = q.lower()
    return q in row.name.lower() or (row.dlq.total > 0 and q in row.dlq_name.lower())


def _listed(row: queries.QueueRow) -> bool:
    """A row the table lists: a queue with messages or a row of its own, or a DLQ with messages."""
    return row.exists or row.configured or row.dlq.total > 0


def table(overview: queries.Overview, listing: Listing, now: int) -> dict:
    """The page of rows ``listing`` asks for (copies: the overview is shared between requests),
    with their charts, and the paging around it."""
    rows = [r for r in overview.rows if _listed(r) and (not listing.q or _matches(r, listing.q))]
    rows.sort(key=_key(listing.sort))
    paginator = Paginator(rows, PER_PAGE)
    page = paginator.get_page(listing.page)
    shown = [dataclasses.replace(r) for r in page.object_list]
    names = [r.name for r in shown] + [r.dlq_name for r in shown if r.dlq.total]
    series = history.depth_series(names, now=now, buckets=BUCKETS) if names else {}
    for row in shown:
        row.chart = _chart([series.get(row.name)], label=f"{row.name} depth, last 24 hours", now=now)
        row.dlq_chart = (_chart([series.get(row.dlq_name)], label=f"{row.dlq_name} depth, last 24 hours", now=now,
                                classes=("line-dlq",)) if row.dlq.total else None)
    current = dataclasses.replace(listing, page=page.number)
    return {
        "rows": shown,
        "listing": current,
        "sorts": SORTS,
        "sort_label": SORTS[listing.sort],
        "matched": paginator.count,
        "first": page.start_index(),
        "last": page.end_index(),
        "pages": paginator.num_pages,
        "prev_query": current.query(page=page.number - 1) if page.has_previous() else None,
        "next_query": current.query(page=page.number + 1) if page.has_next() else None,
        "this_query": current.query(),
        "per_page": PER_PAGE,
    }


def _chart(series, *, label: str, now: int, classes=("line-queue",)):
    """A sparkline once a line can be drawn (two points); until then a placeholder that says when:
    the queue-depth job keeps a sample per 5-minute slot, and a sample is a point of its own once
    it is a bucket (:data:`BUCKETS` over 24 hours) old."""
    values = series[0] or []
    points = sum(v is not None for v in values)
    if points >= 2:
        return charts.sparkline(series, label=label, classes=classes)
    if points == 1:
        return charts.collecting(label, f"a line within {history.WINDOW_MS // BUCKETS // 60_000} min")
    return charts.collecting(label, f"first sample in {minutes_to_next_sample(now)} min")


def minutes_to_next_sample(now: int) -> int:
    """Whole minutes (at least 1) until the next 5-minute slot, where the queue-depth job (every
    30 s) takes its next round of samples."""
    return max(1, -(-((now // history.SLOT_MS + 1) * history.SLOT_MS - now) // 60_000))
