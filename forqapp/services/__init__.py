"""The queue's operations: validation → store (SQL) → metrics and wake-ups.

The HTTP APIs, the Python API (re-exported from ``forqapp``), the worker, the admin, the UI pages
and the jobs all call these functions; none of them writes SQL. One module per concern:
:mod:`.produce`, :mod:`.consume`, :mod:`.settle`, :mod:`.queues` (with the queue policy of
:mod:`.policies` and the limits of :mod:`.limits`), :mod:`.staging` (the Spark connector's bulk
operations), :mod:`.throttles`, :mod:`.maintenance` (the background jobs' work), :mod:`.leases`,
:mod:`.schedules`, :mod:`.history` and :mod:`.clock` (the queue clock follows the database's); the
async side: :mod:`.db` (the database threads), :mod:`.groupcommit`, :mod:`.wakeups`, :mod:`.notify`
and :mod:`.waiting`. This package re-exports the public names of each, so callers write
``services.send(...)``.
"""

from .base import STAGE_TTL_MS, ReceivedMessage, SendResult, alias, now_ms
from .consume import claim, claim_many, peek, receive, receive_many
from .db import run_async
from .leases import acquire_lease, lease_holder, release_lease
from .maintenance import (
    delete_expired_dlq,
    delete_failed_dlq,
    health,
    healthy,
    in_flight_counts,
    move_expired_to_dlq,
    move_failed_to_dlq,
    optimize_database,
    queue_depths,
    ready_group_counts,
    recover_stale,
)
from .moves import MoveInfo, cancel_move, jobs_running, list_moves, move_info, run_moves, start_move
from .policies import forget_policies, policy
from .produce import SEND_OPTIONS, content_storable, send, send_entries, send_many
from .queues import (
    GroupInfo,
    QueueInfo,
    busiest_groups,
    configure_queue,
    dead_letter_sources,
    declare_queue,
    delete_dead,
    delete_queue,
    group_info,
    list_queues,
    message_sources,
    purge,
    queue_info,
    queue_names,
    requeue,
    undeclared,
)
from .settle import (
    MAX_ERROR_CHARS,
    ack,
    ack_delivery,
    ack_many,
    change_visibility,
    defer,
    describe_error,
    extend,
    fail,
    nack,
    nack_delivery,
    nack_many,
    release,
    release_many,
    settle_many,
)
from .staging import discard_staged, publish_sink_batch, publish_staged, snapshot_bounds, snapshot_page, stage
from .throttles import auth_blocked, auth_failed, auth_retry_after, login_blocked_until, login_failed
from .wakeups import (
    Due,
    default_api_workers,
    default_db_threads,
    due,
    due_counts,
    startup_problems,
    wake_poll_interval,
    wake_version,
)

__all__ = [
    "MAX_ERROR_CHARS", "SEND_OPTIONS", "STAGE_TTL_MS", "Due", "GroupInfo", "MoveInfo", "QueueInfo", "ReceivedMessage", "SendResult",
    "ack", "ack_delivery", "ack_many", "acquire_lease", "alias", "auth_blocked", "auth_failed",
    "auth_retry_after", "busiest_groups", "change_visibility", "claim", "claim_many", "configure_queue", "content_storable",
    "declare_queue", "default_api_workers", "default_db_threads", "defer", "delete_dead",
    "delete_expired_dlq", "delete_failed_dlq", "delete_queue", "describe_error", "discard_staged", "due",
    "due_counts", "extend", "fail", "forget_policies", "group_info", "health", "healthy", "in_flight_counts", "lease_holder",
    "list_queues", "login_blocked_until", "login_failed", "move_expired_to_dlq", "move_failed_to_dlq",
    "nack", "nack_delivery", "nack_many", "now_ms", "optimize_database", "peek", "policy", "publish_sink_batch", "publish_staged",
    "purge", "queue_depths", "queue_info", "queue_names", "ready_group_counts", "receive", "receive_many", "recover_stale", "release",
    "release_lease", "release_many", "requeue", "run_async", "send", "send_entries", "send_many",
    "settle_many", "snapshot_bounds", "snapshot_page", "stage", "startup_problems", "wake_poll_interval",
    "wake_version", "undeclared", "message_sources", "start_move", "list_moves", "move_info", "cancel_move", "run_moves", "jobs_running", "dead_letter_sources",
]
