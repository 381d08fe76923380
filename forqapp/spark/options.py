"""The ``forq`` format's options: strings in a case-insensitive map, parsed and checked here with
messages that say which option is wrong and why."""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from .. import vocab  # Django-free, like this package
from .client import ForqClient


def sink_id(query_id: str | None, checkpoint_location: str | None = None, query_name: str | None = None) -> str | None:
    """The name the server records a query's batches under (a token: ``[A-Za-z0-9._-]``, 100
    characters at most): Spark's query id, else a hash of the checkpoint location, else of the
    query's name; None with none of them."""
    if query_id:
        return "q-" + hashlib.sha256(query_id.encode()).hexdigest()[:40]
    if checkpoint_location:
        return "cp-" + hashlib.sha256(checkpoint_location.rstrip("/").encode()).hexdigest()[:40]
    if query_name:
        return "qn-" + hashlib.sha256(query_name.encode()).hexdigest()[:40]
    return None


_D = TypeVar("_D", int, None)  # _int's default: an int, or None (then the result may be None)


class ForqOptionError(ValueError):
    """An option of the ``forq`` format is missing or invalid."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None:
        lowered = name.lower()
        for key, v in options.items():
            if key.lower() == lowered:
                return v
    return value


def _int(options: Mapping[str, str], name: str, default: _D, lo: int, hi: int) -> int | _D:
    raw = _get(options, name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ForqOptionError(f"forq option {name!r} must be an integer, not {raw!r}") from None
    if not lo <= value <= hi:
        raise ForqOptionError(f"forq option {name!r} must be from {lo} to {hi}, not {value}")
    return value


def _float(options: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    raw = _get(options, name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ForqOptionError(f"forq option {name!r} must be a number, not {raw!r}") from None
    if not lo <= value <= hi:
        raise ForqOptionError(f"forq option {name!r} must be from {lo:g} to {hi:g}, not {value:g}")
    return value


#: Every option of the format (a misspelt one is an error, not silently ignored); ``path`` is
#: Spark's own, set by ``load(path)`` / ``save(path)``, and means nothing here.
KNOWN = ("url", "apiKey", "queue", "delivery", "batchSize", "numPartitions", "pageSize", "maxMessagesPerBatch",
         "waitSeconds", "timeout", "batchId")
#: Spark's own options, which it passes along: ``path`` (``load(path)`` / ``save(path)``, meaning
#: nothing here), and a streaming query's ``checkpointLocation`` and ``queryName`` (they name the
#: query for the streaming sink).
_KNOWN_LOWER = frozenset(k.lower() for k in (*KNOWN, "path", "checkpointLocation", "queryName"))


@dataclass(frozen=True)
class ForqOptions:
    url: str
    api_key: str
    queue: str
    batch_size: int = 500  # write: messages per staged request
    num_partitions: int | None = None  # read: id-range partitions (default: one per 250,000 rows)
    page_size: int = 5000  # read: rows per snapshot page
    max_messages_per_batch: int = 1000  # stream: messages claimed per micro-batch
    wait_seconds: float = 1.0  # stream: how long a claim waits for a message when the queue is idle
    timeout: float = 300.0  # seconds per HTTP request
    exactly_once: bool = True  # write: stage + publish on commit (False: produce batches directly)
    checkpoint_location: str | None = None  # streaming write: Spark's option, names the query
    query_name: str | None = None  # streaming write: Spark's, names the query without the above
    batch_id: int | None = None  # batch write in foreachBatch: publish as this micro-batch of the query, once

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ForqOptions:
        unknown = sorted(k for k in options if k.lower() not in _KNOWN_LOWER)
        if unknown:
            close = difflib.get_close_matches(unknown[0], KNOWN, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ForqOptionError(f"unknown forq option {unknown[0]!r}{hint}; the options are "
                                  f"{', '.join(KNOWN)}")
        url = (_get(options, "url") or "").strip()
        if not url:
            raise ForqOptionError("forq option 'url' is required (the forqapp API base URL, "
                                  "e.g. http://forq.internal:8080)")
        if not url.startswith(("http://", "https://")):
            raise ForqOptionError(f"forq option 'url' must start with http:// or https://, not {url!r}")
        api_key = _get(options, "apiKey")
        if not api_key:
            raise ForqOptionError("forq option 'apiKey' is required (forqapp's FORQ_AUTH_SECRET, or a scoped "
                                  "key's token: produce to write, read to read, consume to stream)")
        queue = (_get(options, "queue") or "").strip()
        if not queue:
            raise ForqOptionError("forq option 'queue' is required")
        if not vocab.QUEUE_NAME.fullmatch(queue):
            raise ForqOptionError(f"forq option 'queue' must match ^{vocab.QUEUE_NAME_PATTERN}$, not {queue!r}")
        delivery = (_get(options, "delivery") or "exactlyOnce").strip()
        if delivery.lower() not in ("exactlyonce", "atleastonce"):
            raise ForqOptionError(f"forq option 'delivery' must be exactlyOnce or atLeastOnce, not {delivery!r}")
        return cls(
            exactly_once=delivery.lower() == "exactlyonce",
            url=url,
            api_key=api_key,
            queue=queue,
            batch_size=_int(options, "batchSize", 500, 1, 10_000),
            num_partitions=_int(options, "numPartitions", None, 1, 10_000),
            page_size=_int(options, "pageSize", 5000, 1, 10_000),
            max_messages_per_batch=_int(options, "maxMessagesPerBatch", 1000, 1, 100_000),
            wait_seconds=_float(options, "waitSeconds", 1.0, 0.0, 30.0),
            timeout=_float(options, "timeout", 300.0, 1.0, 3600.0),
            checkpoint_location=(_get(options, "checkpointLocation") or "").strip() or None,
            query_name=(_get(options, "queryName") or "").strip() or None,
            batch_id=_int(options, "batchId", None, 0, 2**63 - 1),
        )

    def sink(self, query_id: str | None = None) -> str | None:
        """The name the server records this query's micro-batches under (see :func:`sink_id`)."""
        return sink_id(query_id, self.checkpoint_location, self.query_name)

    def client(self):
        return ForqClient(self.url, self.api_key, timeout=self.timeout)

    @property
    def is_dlq(self) -> bool:
        return vocab.is_dlq(self.queue)
