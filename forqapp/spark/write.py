"""The ``forq`` format's writes: each task attempt stages its rows under a token of its own (or,
with ``delivery=atLeastOnce``, sends them straight to the queue); :class:`ForqWriter` (batch) and
:class:`~.sink.ForqStreamWriter` (streaming) publish a job's or a micro-batch's tokens in one
transaction. No Django, HTTP only (:mod:`.client`)."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from .. import vocab  # Django-free, like this package
from .client import ForqClientError
from .options import ForqOptionError, ForqOptions

logger = logging.getLogger("forqapp.spark")

MAX_PUBLISH = 10_000  # write: tokens (task outputs) published in one request, one transaction
MAX_REQUEST_BYTES = 2 * 1024 * 1024  # write: a request's body at most (FORQ_MAX_BODY_BYTES' default)


# --- batch write -----------------------------------------------------------------------------


@dataclass
class ForqCommitMessage(WriterCommitMessage):
    token: str
    queue: str
    count: int
    query: str | None = None  # a streaming write's: Spark's id of the query (kept in its checkpoint)


#: The optional columns a write takes, each sent as the bulk message field of the same name (the
#: batch and the streaming writers both go through here).
WRITE_OPTIONAL = ("processAfter", "priority", "attributes", "group")


def _integral(data_type) -> bool:
    return isinstance(data_type, LongType | IntegerType | ShortType | ByteType)


def _string_map(data_type) -> bool:
    return isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType) \
        and isinstance(data_type.valueType, StringType)


_WRITE_RULES = {  # column -> (accepted type, what to say when it is not)
    "processAfter": (_integral, "an integer (Unix ms)"),
    "priority": (_integral, "an integer (-1000..1000, higher is delivered first)"),
    "attributes": (_string_map, "a map<string,string> (up to 10 pairs; e.g. F.create_map(...))"),
    "group": (lambda t: isinstance(t, StringType), "a string (a message group: 1 to 128 of A-Z a-z 0-9 _ . : / = + @ -)"),
}


def _check_write_schema(schema: StructType) -> dict[str, str]:
    """The DataFrame needs a string ``content``; ``processAfter`` (Unix ms), ``priority``,
    ``attributes`` and ``group`` (a message group; null: none) are optional (other columns are ignored). Column names match without regard to
    case, as Spark resolves them (an exact match first). Returns {column: its name in the schema}
    for ``content`` and the optional columns present."""
    exact = {f.name: f for f in schema.fields}
    folded: dict[str, StructField] = {}
    for f in schema.fields:
        folded.setdefault(f.name.lower(), f)
    fields = {name: exact.get(name) or folded.get(name.lower()) for name in ("content", *WRITE_OPTIONAL)}
    content = fields.get("content")
    if content is None or not isinstance(content.dataType, StringType):
        raise ForqOptionError('format "forq" writes need a string column "content" (found: '
                              + ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields) + ")")
    present = {"content": content.name}
    for name in WRITE_OPTIONAL:
        field = fields.get(name)
        if field is None:
            continue
        accepts, expected = _WRITE_RULES[name]
        if not accepts(field.dataType):
            raise ForqOptionError(f'column "{name}" must be {expected}, not {field.dataType.simpleString()}')
        present[name] = field.name
    return present


def _check_priorities(values: list) -> None:
    lo, hi = vocab.PRIORITY_MIN, vocab.PRIORITY_MAX
    bad = next((v for v in values if v is not None and not lo <= v <= hi), None)
    if bad is not None:
        raise ValueError(f'format "forq": column "priority" holds {bad}: a priority is from {lo} to {hi}')


def _check_groups(values: list) -> None:
    bad = next((v for v in values if v is not None and not vocab.GROUP_NAME.fullmatch(v)), None)
    if bad is not None:
        raise ValueError(f'format "forq": column "group" holds {bad[:80]!r}: a group is 1 to {vocab.GROUP_MAX} '
                         "characters of A-Z a-z 0-9 _ . : / = + @ - (null: no group)")


def _attributes(pairs: list[tuple[str, str | None]] | None) -> dict[str, str] | None:
    """A map value (Arrow gives a list of pairs) as a message's attributes, checked by the server's
    rules here so that a failing job says why (the API answers only an error code)."""
    if not pairs:
        return None  # null or an empty map: no attributes
    attributes = dict(pairs)
    if len(attributes) > vocab.MAX_ATTRIBUTES:
        raise ValueError(f'format "forq": column "attributes" holds a map of {len(attributes)} keys '
                         f"(at most {vocab.MAX_ATTRIBUTES})")
    for key, value in attributes.items():
        if not 1 <= len(key) <= vocab.ATTRIBUTE_KEY_MAX:
            raise ValueError(f'format "forq": attribute key {key[:80]!r} must be 1 to {vocab.ATTRIBUTE_KEY_MAX} '
                             "characters")
        if value is None:
            raise ValueError(f'format "forq": attribute {key!r} is null (filter it out of the map first, '
                             "e.g. with map_filter)")
        if len(value) > vocab.ATTRIBUTE_VALUE_MAX:
            raise ValueError(f'format "forq": attribute {key!r} is {len(value)} characters long '
                             f"(at most {vocab.ATTRIBUTE_VALUE_MAX})")
    return cast(dict[str, str], attributes)


def _bulk_messages(contents: list, optional: dict[str, list]) -> list[dict[str, Any]]:
    """Bulk message bodies: ``{"content"}`` plus each optional column's non-null value (a map
    column arrives from Arrow as a list of pairs; an empty map is no attributes). Raises
    ``ValueError`` for a priority or attributes the server would refuse."""
    if not optional:
        return [{"content": c} for c in contents]
    if "priority" in optional:
        _check_priorities(optional["priority"])
    if "group" in optional:
        _check_groups(optional["group"])
    if "attributes" in optional:
        optional = {**optional, "attributes": [_attributes(a) for a in optional["attributes"]]}
    names = list(optional)
    messages = []
    for i, c in enumerate(contents):
        item = {"content": c}
        for name in names:
            value = optional[name][i]
            if value is not None:
                item[name] = value
        messages.append(item)
    return messages


def _task_token(job: str) -> str:
    """A token unique to this task attempt: ``job-partition-attempt-taskAttemptId`` (the last is
    unique in the Spark application, so even a zombie attempt of a retried stage has its own)."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except Exception:  # noqa: BLE001 - no task context: a random token is unique all the same
        ctx = None
    if ctx is None:
        return f"{job}-x-{uuid.uuid4().hex[:12]}"
    return f"{job}-{ctx.partitionId()}-{ctx.attemptNumber()}-{ctx.taskAttemptId()}"


class Stager:
    """What the batch and the streaming writers share: a task's ``write`` (stage its rows under a
    token of its own, or send them with ``delivery=atLeastOnce``) and the publish of many tokens."""

    def __init__(self, options: ForqOptions, schema: StructType):
        if options.is_dlq:
            raise ForqOptionError(f"cannot write to dead-letter queue {options.queue!r}")
        self.options = options
        self.columns = _check_write_schema(schema)
        self.job = uuid.uuid4().hex[:16]

    def _token(self) -> str:
        return _task_token(self.job)

    def write(self, iterator) -> ForqCommitMessage:
        opts = self.options
        token = self._token()
        count = 0
        client = opts.client()
        try:
            for batch in iterator:
                contents = batch.column(self.columns["content"]).to_pylist()
                if None in contents:  # (an empty string is content: Forq stores it)
                    raise ValueError('format "forq": column "content" holds a null '
                                     "(filter those rows out first)")
                optional = {name: batch.column(column).to_pylist() for name, column in self.columns.items()
                            if name != "content"}
                for start in range(0, len(contents), opts.batch_size):
                    end = start + opts.batch_size
                    items = _bulk_messages(contents[start:end], {k: v[start:end] for k, v in optional.items()})
                    count += self._send(client, token, items)
        except ForqClientError as exc:
            if exc.status in (401, 403):  # the job fails: say why in words, with the server's code
                refused = "the API key was refused" if exc.status == 401 else \
                    f"the API key may not produce to queue {opts.queue!r}"
                detail = f"HTTP {exc.status} {exc.code}" if exc.code else f"HTTP {exc.status}"
                raise ForqClientError(f'format "forq": {refused} ({detail})', exc.status, exc.code) from exc
            self._drop(client, token, exc)
            raise
        except BaseException as exc:
            self._drop(client, token, exc)
            raise
        finally:
            client.close()
        return ForqCommitMessage(token=token, queue=opts.queue, count=count, query=self._query())

    def _query(self) -> str | None:
        return None

    def _drop(self, client, token: str, exc: BaseException) -> None:
        """This attempt's rows will never be published; drop them now rather than leave them to the
        cleanup job. Best effort: the error that matters is the one re-raised. (Not with a key the
        server refused: it would refuse the discard too, and count one more failed key towards the
        address's throttle: the next job got 429, not 401.)"""
        if not self.options.exactly_once or getattr(exc, "status", None) in (401, 403, 429):
            return
        try:
            client.close()
            client.discard([(token, self.options.queue)])
        except Exception:  # noqa: BLE001
            logger.warning("could not discard staged token %s", token)

    def _send(self, client, token: str, items: list[dict[str, Any]]) -> int:
        """Stage (or send) ``items`` in requests within the server's body cap: a batch whose body
        is larger than :data:`MAX_REQUEST_BYTES` (the server's default cap), or that a server with
        a smaller cap refuses with 413 (refused before it is read: nothing was written), is sent
        in halves. ``batchSize`` rows of a few KB each would pass the cap otherwise."""
        body = json.dumps({"messages": items}, separators=(",", ":")).encode()
        if len(body) <= MAX_REQUEST_BYTES or len(items) == 1:
            try:
                if self.options.exactly_once:
                    return client.stage_raw(self.options.queue, token, body)
                return client.send_batch_raw(self.options.queue, body)  # visible at once; a retried task sends again
            except ForqClientError as exc:
                if exc.status != 413 or len(items) == 1:
                    raise
        half = len(items) // 2
        return self._send(client, token, items[:half]) + self._send(client, token, items[half:])

    @staticmethod
    def _staged(messages) -> list[tuple[str, str]]:
        return [(m.token, m.queue) for m in messages if isinstance(m, ForqCommitMessage)]

    def _publish(self, messages, publish) -> int | None:
        """``publish(client, staged)`` every task's token in one request (one transaction); a
        refusal for the queue's max_length drops the rows at once."""
        staged = self._staged(messages)
        if len(staged) > MAX_PUBLISH:
            # one publish request is one transaction; the job is aborted and nothing is visible
            raise ForqOptionError(f'format "forq" publishes at most {MAX_PUBLISH} partitions in one job '
                                  f"(this one has {len(staged)}): coalesce() or repartition() first")
        with self.options.client() as client:
            try:
                return publish(client, staged)
            except ForqClientError as exc:
                if exc.code == "queue.full":  # refused whole: nothing was published; drop the rows now
                    with contextlib.suppress(ForqClientError):
                        client.discard(staged)
                    raise ForqClientError(f'format "forq": queue {self.options.queue!r} is at its max_length: '
                                          "nothing was published", exc.status, exc.code) from exc
                raise

    def _publish_micro_batch(self, messages, sink: Callable[[], str], batch_id: int) -> None:
        """Publish micro-batch ``batch_id`` of the query ``sink()`` names, once: in the same
        transaction the server records it, and a batch recorded before (or an earlier one) publishes
        nothing and drops its rows. A batch without rows records nothing."""
        if not any(isinstance(m, ForqCommitMessage) and m.count for m in messages):
            self._discard(messages)  # tokens with no rows: nothing to publish, nothing to record
            return
        name = sink()
        published = self._publish(messages, lambda client, staged: client.publish_batch(
            staged, self.options.queue, name, batch_id))
        if published is None:
            logger.info("forq: batch %d of query %s was published before: nothing published again", batch_id, name)
        else:
            logger.info("forq: batch %d: published %d messages to %s", batch_id, published, self.options.queue)

    def _discard(self, messages) -> None:
        staged = self._staged(messages)
        if staged and self.options.exactly_once:
            with self.options.client() as client:
                client.discard(staged)


class ForqWriter(Stager, DataSourceArrowWriter):
    """``df.write.format("forq")``: a job's rows, published in one transaction when it commits.
    With ``batchId`` (a streaming query's ``foreachBatch``: :func:`forqapp.spark.foreach_batch`),
    published as that micro-batch of the query named by ``checkpointLocation`` (or ``queryName``),
    once: as the streaming sink publishes, so a batch Spark runs again publishes nothing."""

    def __init__(self, options: ForqOptions, schema: StructType):
        super().__init__(options, schema)
        if options.batch_id is not None and options.exactly_once and options.sink() is None:
            raise ForqOptionError('format "forq" writes with a batchId need to know the query: set '
                                  '.option("checkpointLocation", ...) to the streaming query\'s (or its queryName)')

    def commit(self, messages) -> None:
        """All tasks succeeded: publish every task's rows in one transaction."""
        if not self.options.exactly_once:
            return  # delivery=atLeastOnce: every batch was visible as soon as it was sent
        batch_id, sink = self.options.batch_id, self.options.sink()
        if batch_id is not None and sink is not None:
            self._publish_micro_batch(messages, lambda: sink, batch_id)
            return
        published = self._publish(messages, lambda client, staged: client.publish(staged))
        expected = sum(m.count for m in messages if isinstance(m, ForqCommitMessage))
        logger.info("forq: published %d messages to %s (%d staged)", published, self.options.queue, expected)

    def abort(self, messages) -> None:
        """The job failed: discard what the tasks that reported back staged. An attempt that
        failed discarded its own rows; one killed mid-write (the job aborted under it) may leave
        rows behind: they never become visible, and the server's cleanup job deletes them (staged
        rows expire after 24 h)."""
        self._discard(messages)
