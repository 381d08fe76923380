"""Queues: their policy rows, information and counts, purge and delete, and the dead-letter
queues' requeue and delete."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from django.db import transaction

from .. import errors, metrics, store, validation, vocab
from ..errors import ForqError
from ..store import (
    POLICY_COLUMNS,
    QueueCounts,
    QueueRow,
    StateCounts,
    Store,
)
from ..vocab import base_of
from . import base, limits
from . import policies as policy_module
from .base import _store
from .maintenance import move_failed_to_dlq
from .notify import kick
from .policies import _policies, forget_policies, policy

T = TypeVar("T")

def _ensure_queue(st: Store, queue: str) -> None:
    """Before the first send to ``queue`` (its cached policy says it has no row): make its row
    within ``FORQ_MAX_QUEUES`` (``queue.limit_reached`` beyond), and read its policy again next."""
    limits.ensure_queue(st, queue)
    _policies.pop((st.alias, base_of(queue)), None)


# --- queues -----------------------------------------------------------------------------------


@dataclass
class QueueInfo:
    """A queue's policy (``policy``: every field resolved; ``overrides``: those the queue sets
    itself), state and counts (ready, delayed, in_flight, failed, dlq)."""

    name: str
    policy: dict[str, Any]
    overrides: dict[str, Any]
    paused: bool
    counts: dict[str, int]
    last_sequence: int
    created_at: int | None
    groups: int = 0  # message groups that have messages (ready or in processing)

    def json(self) -> dict[str, Any]:
        return asdict(self)


def _info(name: str, row: QueueRow | None, counts: QueueCounts, groups: int = 0) -> QueueInfo:
    pol = policy_module.resolve(row)
    public = pol.public()
    public["dead_letter_queue"] = pol.dead_letter_queue or vocab.dlq_of(name)
    return QueueInfo(name, public, pol.overrides, pol.paused, counts._asdict(),
                     row.last_sequence if row else 0, row.created_at if row else None, groups)


@dataclass(frozen=True)
class GroupInfo:
    """A message group of a queue: its ready messages (due now or later), those in processing under
    a live lease, and when its next claim may come (Unix ms; None: it has no messages)."""

    group: str
    ready: int
    in_flight: int
    next_eligible_at: int | None

    def json(self) -> dict[str, Any]:
        return asdict(self)


def group_info(queue: str, group: str, *, using: str | None = None) -> GroupInfo:
    """Group ``group`` of ``queue`` now (all zeros and None for a group without messages)."""
    queue = validation.queue_name(queue, produce=True)
    name = validation.group(group)
    if name is None:
        raise ForqError(errors.BODY_INVALID, "group is missing")
    return GroupInfo(*_store(using).group_state(queue, name, base.now_ms()))


def busiest_groups(queue: str, limit: int = 20, *, using: str | None = None) -> list[GroupInfo]:
    """``queue``'s groups with the most messages (ready and in flight), most first, up to ``limit``
    (the admin's and the UI's view: it reads every group of the queue)."""
    queue = validation.queue_name(queue, produce=True)
    return [GroupInfo(*g) for g in _store(using).busiest_groups(queue, base.now_ms(), limit)]


def configure_queue(name: str, change: validation.PolicyChange | None = None, *, using: str | None = None,
                    **fields: Any) -> QueueInfo:
    """Set ``name``'s policy fields (creating the queue if needed): ``max_attempts`` (≥ 1 or
    ``"unlimited"``), ``backoff`` (a list of ms, or ``{"base_ms", "max_ms", "jitter"}``),
    ``visibility_timeout``, ``retention``, ``dlq_retention``, ``dedup_window`` (seconds or
    timedelta), ``max_length``, ``ordering`` (``"fifo"``/``"lifo"``/``"due"``), ``paused``. Fields not given
    keep their value; None resets one to the global setting. ``change``: a face's request, parsed
    already (its stored columns are used as they are; ``fields`` must then be empty)."""
    name = validation.queue_name(name, produce=True)
    if change is not None and fields:
        raise TypeError("configure_queue takes a PolicyChange or policy fields, not both")
    changes = change.columns if change is not None else validation.policy(fields)
    st = _store(using)
    with transaction.atomic(using=st.alias):
        if changes.get("dead_letter_queue") is not None:
            changes = {**changes, "dead_letter_queue": _dead_letter_queue(st, name, changes["dead_letter_queue"])}
        row = st.queue_get(name)
        current = {c: getattr(row, c) for c in (*POLICY_COLUMNS, "paused")} if row else {}
        if row is None:
            limits.ensure_queue(st, name)
        st.queue_put(name, {**current, **changes}, base.now_ms())
    forget_policies()
    if row is not None and row.paused and changes.get("paused") is False:
        kick(st.alias)  # consumers waiting on a paused queue (or its DLQ) look again
    return queue_info(name, using=st.alias)


def declare_queue(name: str, fields: dict[str, Any], *, using: str | None = None) -> QueueInfo:
    """Make ``name``'s policy exactly ``fields`` (the others follow the global settings):
    ``FORQ_QUEUES``' declarative form. Idempotent. A queue staff paused stays paused unless
    ``fields`` says ``paused`` (a deploy's ``migrate`` does not resume it)."""
    name = validation.queue_name(name, produce=True)
    st = _store(using)
    # Not held to FORQ_MAX_QUEUES: the project's own configuration (migrate must not fail because
    # clients made the other queues); its queues count toward the limit, and E050 keeps it within.
    columns = _declared_columns(st, name, fields)
    with transaction.atomic(using=st.alias):
        row = st.queue_get(name)
        if row is not None and "paused" not in columns:
            columns["paused"] = row.paused
        st.queue_put(name, columns, base.now_ms())
    forget_policies()
    return queue_info(name, using=st.alias)


def _declared_columns(st: Store, name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The stored columns of ``fields`` declared for queue ``name``. A dead_letter_queue may name a
    queue declared after it (not checked to exist)."""
    columns = validation.policy(fields)
    if columns.get("dead_letter_queue") is not None:
        columns["dead_letter_queue"] = _dead_letter_queue(st, name, columns["dead_letter_queue"], exists=False)
    return columns


def undeclared(declared: dict[str, dict[str, Any]], *, using: str | None = None) -> list[str]:
    """The queues of ``declared`` (``FORQ_QUEUES``' form) whose stored policy is not what
    :func:`declare_queue` would make it (or that have no row yet): a changed setting not applied."""
    st = _store(using)
    names = []
    for name, fields in declared.items():
        try:
            columns = _declared_columns(st, name, dict(fields))
        except ForqError:  # not a valid declaration: its check (E050) says so
            continue
        row = st.queue_get(name)
        expected = {**dict.fromkeys(POLICY_COLUMNS), **columns}
        if "paused" not in columns:  # staff's to set (declare_queue keeps it)
            expected.pop("paused", None)
        if row is None or any(getattr(row, c) != v for c, v in expected.items()):
            names.append(name)
    return names


def _dead_letter_queue(st: Store, name: str, target: str, *, exists: bool = True) -> str | None:
    """The stored ``dead_letter_queue`` of queue ``name`` given ``target``: None for its own
    ``<name>-dlq`` (the default), else ``target`` if it is another queue that exists (a DLQ
    ``<other>-dlq`` exists with ``<other>``), as SQS requires of a redrive target; a queue is never its
    own."""
    if target == vocab.dlq_of(name):
        return None
    if target == name:
        raise ForqError(errors.BODY_INVALID, f"queue {name!r} cannot be its own dead-letter queue")
    if exists and st.queue_get(base_of(target)) is None and not st.state_counts(base.now_ms(), [target]):
        raise ForqError(errors.BODY_INVALID, f"dead_letter_queue: no queue {target!r} (create it first)")
    return target


def check_dead_letter_queue(name: str, target: str, *, using: str | None = None) -> None:
    """Raise ``ForqError`` unless ``target`` may be queue ``name``'s ``dead_letter_queue`` (what
    :func:`configure_queue` checks: another queue that exists); a form's check before it saves."""
    _dead_letter_queue(_store(using), name, validation.dead_letter_queue(target))


def message_sources(queue: str, message_ids: list[str], *, using: str | None = None) -> dict[str, str]:
    """``{id: the queue it came from}`` for the dead letters among ``message_ids`` of ``queue`` that
    remember it (a message moved to a dead-letter queue, its own ``<name>-dlq`` or another)."""
    return _store(using).sources_of(validation.queue_name(queue), message_ids)


def dead_letter_sources(name: str, *, using: str | None = None) -> list[str]:
    """The queues whose dead letters go to ``name`` (its ``dead_letter_queue``, or ``name`` is
    their own ``<queue>-dlq``), by name."""
    name = validation.queue_name(name)
    st = _store(using)
    sources = set(st.dead_letter_sources(name))
    if vocab.is_dlq(name):
        row = st.queue_get(base_of(name))
        if row is not None and row.dead_letter_queue is None:
            sources.add(base_of(name))
    return sorted(sources)


def queue_info(name: str, *, using: str | None = None) -> QueueInfo:
    """``name``'s policy, state and counts; raises ``ForqError`` (``not_found.queue``) for a queue
    that has neither a row nor messages. A dead-letter queue has none of its own: its counts are
    its queue's ``counts["dlq"]``."""
    if isinstance(name, str) and vocab.is_dlq(name):
        raise ForqError(errors.PRODUCE_TO_DLQ, f"{name!r} is a dead-letter queue: queue_info({base_of(name)!r}) "
                                               "holds it (its counts' 'dlq')")
    name = validation.queue_name(name, produce=True)
    st = _store(using)
    row = st.queue_get(name)
    info = _info(name, row, st.queue_counts(name, base.now_ms()), st.group_count(name))
    if row is None and not any(info.counts.values()):
        raise ForqError(errors.NOT_FOUND_QUEUE, f"no queue {name!r}")
    return info


def list_queues(*, using: str | None = None) -> list[QueueInfo]:
    """Every queue (with a row, or with messages), by name."""
    st = _store(using)
    now = base.now_ms()
    rows = {r.name: r for r in st.queue_list()}
    names = set(rows) | {base_of(d.queue) for d in st.queue_depths()}
    counts = st.state_counts(now, [q for n in names for q in (n, n + vocab.DLQ_SUFFIX)])  # one read for all
    return [_info(n, rows.get(n), store.queue_counts_of(counts, n)) for n in sorted(names)]


def queue_names(*, using: str | None = None) -> list[str]:
    """The names of the queues that have a row, by name (one short read)."""
    return [r.name for r in _store(using).queue_list()]


def purge(name: str, *, ready_only: bool = False, using: str | None = None) -> int:
    """Delete every message of queue ``name`` (in any state; its DLQ is kept); returns how many.
    ``ready_only``: only the messages no consumer holds (ready, delayed, or under an ended lease),
    as a broker's purge (Celery's) leaves the ones being worked on."""
    name = validation.queue_name(name, produce=True)
    n = _store(using).purge(name, base.now_ms() if ready_only else None)
    metrics.cleaned_up("purged", n)
    return n


def delete_queue(name: str, *, using: str | None = None) -> bool:
    """Delete queue ``name``: its policy and its messages. Its dead-letter queue is a queue of its
    own: its messages stay (delete them with :func:`delete_dead`). A later produce creates it
    again (its sequence numbers never go back). False if there was no such queue."""
    name = validation.queue_name(name, produce=True)
    done = _store(using).queue_delete(name, base.now_ms())
    forget_policies()
    return done


def state_counts(now: int, names: list[str] | None = None, *, using: str | None = None) -> dict[str, StateCounts]:
    """{queue: counts} of every queue (or of ``names``) at ``now``, in one read (the UI's tables):
    a delivery whose lease ended counts as ready, a message sent due is ready."""
    return _store(using).state_counts(now, names)


def set_sqs_attributes(name: str, attributes: dict[str, Any] | None, *, using: str | None = None) -> None:
    """Keep the SQS face's own attributes of queue ``name`` (those no policy field holds) in its row."""
    _store(using).queue_set_sqs_attributes(name, json.dumps(attributes) if attributes else None)


def set_sqs_tags(name: str, tags: dict[str, Any] | None, *, using: str | None = None) -> None:
    """Keep the SQS face's queue tags of queue ``name`` in its row."""
    _store(using).queue_set_sqs_tags(name, json.dumps(tags) if tags else None)


def drop_placeholder(name: str, last_sequence: int, updated_at: int, *, using: str | None = None) -> bool:
    """Delete queue ``name``'s row if it is unchanged since it was read (``last_sequence``,
    ``updated_at``) and holds no message: the SQS face's placeholder row of a DLQ."""
    dropped = _store(using).queue_drop_placeholder(name, last_sequence, updated_at)
    forget_policies()
    return dropped


# --- admin: dead-letter queues --------------------------------------------------------------


def requeue(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Move one message (or all) of a DLQ back to its queue, ready, keeping its FIFO place. A
    message out of attempts that the ``failed`` job has not moved to the DLQ yet is moved first. A
    dead letter a consumer holds (received from the DLQ, its lease not over) stays."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    st = _store(using)
    retention = policy(dlq, using=st.alias).retention_ms
    n = st.requeue(dlq, message_id, base.now_ms(), retention)
    if not n and message_id is not None and move_failed_to_dlq(using=st.alias):
        n = st.requeue(dlq, message_id, base.now_ms(), retention)  # (the failed job's work, done now)
    if n:
        metrics.requeued(base_of(dlq), n)
        kick(st.alias, (base_of(dlq),))
    return n


def delete_dead(dlq: str, message_id: str | None = None, *, using: str | None = None) -> int:
    """Delete one message (or all) of a DLQ."""
    dlq = validation.dlq_name(dlq)
    if message_id is not None:
        message_id = validation.message_id(message_id)
    n = _store(using).delete_dlq(dlq, message_id)
    metrics.cleaned_up("deleted_by_user", n)
    return n
