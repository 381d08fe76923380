"""The due order: a queue's ``ordering`` may be ``"due"`` (the Django Tasks backend's queues).

A due-ordered queue is claimed by priority, then by the time each message came due (``process_after``:
a task's past ``run_after`` counts as its time), then sequence (enqueue order). The messages sent with
a due time in the past get an index of their own, ``idx_queue_past`` (queue, priority DESC,
process_after, sequence; partial: ``status = 0 AND process_after < received_at``), so that such a
claim reads them in that order; a plain send writes nothing to it. The other ready messages due when
written are read from ``idx_queue_claim`` as before.

On PostgreSQL, ``forq_claim`` gains the ``'due'`` branch (its other branches are unchanged). Its text
is frozen here, as the store generated it when this migration was written
(``forqapp.store.postgresql.CLAIM_FUNCTION``; ``tests/test_postgres.py`` compares the installed
function with the store's). Going back reinstalls 0015's function.

On PostgreSQL the index is built without ``CONCURRENTLY``, in the migration's transaction; it holds
only the rows sent with a past due time, so that is short.
"""

import importlib

from django.db import migrations, models

CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION forq_claim(p_order text, p_queue text, p_now bigint, p_limit bigint, p_visibility bigint, p_max bigint, p_dlq_ttl bigint, p_among bigint, p_ended_among bigint)
RETURNS TABLE (r_id varchar, r_queue varchar, r_content text, r_attempts integer, r_receipt bigint, r_priority integer, r_attributes text, r_dedup_id varchar, r_sequence bigint, r_received_at bigint, r_first_received_at bigint, r_lease_expires_at bigint, r_state text, r_status integer)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $claim$
BEGIN
    IF p_order = 'fifo' THEN
        RETURN QUERY WITH picked AS (WITH ready AS (
                        SELECT id, priority, sequence FROM messages
                        WHERE queue = p_queue AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, priority, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows
                                    ORDER BY p DESC, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, s
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due ORDER BY priority DESC, sequence LIMIT p_limit)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue || '-dlq' ELSE m.queue END,
    is_dlq = (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) OR m.is_dlq,
    status = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE 1 END,
    attempts = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE m.attempts + 1 END,
    failure_reason = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 'max_attempts_reached' ELSE m.failure_reason END,
    expires_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now + p_dlq_ttl ELSE m.expires_after END,
    processing_started_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN NULL ELSE GREATEST(p_now, m.updated_at + 1) END,
    process_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now ELSE p_now + p_visibility END,
    first_received_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.first_received_at
                             ELSE COALESCE(m.first_received_at, p_now) END,
    updated_at = GREATEST(p_now, m.updated_at + 1)
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status;
        RETURN;
    END IF;
    IF p_order = 'lifo' THEN
        RETURN QUERY WITH picked AS (WITH top AS (SELECT GREATEST(
                  (SELECT priority FROM messages WHERE queue = p_queue AND status = 0 AND process_after <= received_at AND process_after <= p_now ORDER BY priority DESC, sequence LIMIT 1),
                  (SELECT MAX(p) FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after DESC, priority, sequence DESC LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 1 AND process_after <= p_now ORDER BY process_after DESC, priority DESC, sequence DESC LIMIT p_ended_among)) AS window_rows)) AS priority), ready AS (
                        SELECT id, sequence FROM messages
                        WHERE queue = p_queue AND status = 0 AND process_after <= received_at AND process_after <= p_now AND priority = (SELECT priority FROM top)
                        ORDER BY sequence DESC LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after DESC, priority, sequence DESC LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 1 AND process_after <= p_now ORDER BY process_after DESC, priority DESC, sequence DESC LIMIT p_ended_among)) AS window_rows
                                    WHERE p = (SELECT priority FROM top)
                                    ORDER BY s DESC) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY s DESC
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due ORDER BY sequence DESC LIMIT p_limit)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue || '-dlq' ELSE m.queue END,
    is_dlq = (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) OR m.is_dlq,
    status = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE 1 END,
    attempts = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE m.attempts + 1 END,
    failure_reason = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 'max_attempts_reached' ELSE m.failure_reason END,
    expires_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now + p_dlq_ttl ELSE m.expires_after END,
    processing_started_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN NULL ELSE GREATEST(p_now, m.updated_at + 1) END,
    process_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now ELSE p_now + p_visibility END,
    first_received_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.first_received_at
                             ELSE COALESCE(m.first_received_at, p_now) END,
    updated_at = GREATEST(p_now, m.updated_at + 1)
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status;
        RETURN;
    END IF;
    IF p_order = 'random' THEN
        RETURN QUERY WITH picked AS (WITH candidates AS MATERIALIZED (
                          WITH ready AS (
                        SELECT id, priority, sequence FROM messages
                        WHERE queue = p_queue AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_among),
                    by_time AS (SELECT id, priority, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows
                                    ORDER BY p DESC, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, s
                                LIMIT p_among)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due
                          ORDER BY priority DESC, sequence LIMIT p_among)
                      SELECT id FROM messages WHERE id = ANY(ARRAY(SELECT id FROM candidates))
                      AND (queue = p_queue AND status IN (0, 1)
                           AND process_after <= p_now) IS TRUE
                      ORDER BY random() LIMIT p_limit FOR UPDATE SKIP LOCKED)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue || '-dlq' ELSE m.queue END,
    is_dlq = (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) OR m.is_dlq,
    status = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE 1 END,
    attempts = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE m.attempts + 1 END,
    failure_reason = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 'max_attempts_reached' ELSE m.failure_reason END,
    expires_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now + p_dlq_ttl ELSE m.expires_after END,
    processing_started_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN NULL ELSE GREATEST(p_now, m.updated_at + 1) END,
    process_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now ELSE p_now + p_visibility END,
    first_received_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.first_received_at
                             ELSE COALESCE(m.first_received_at, p_now) END,
    updated_at = GREATEST(p_now, m.updated_at + 1)
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status;
        RETURN;
    END IF;
    IF p_order = 'due' THEN
        RETURN QUERY WITH picked AS (WITH ready AS (
                        SELECT id, priority, process_after, sequence FROM messages WHERE queue = p_queue AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    past AS (
                        SELECT id, priority, process_after, sequence FROM messages WHERE queue = p_queue AND status = 0 AND process_after < received_at AND process_after <= p_now
                        ORDER BY priority DESC, process_after, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, priority, process_after, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, process_after AS d, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, process_after AS d, sequence AS s FROM messages
             WHERE queue = p_queue AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows ORDER BY p DESC, d, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, d, s
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id, priority, process_after AS due_at, sequence
               FROM (SELECT * FROM ready UNION SELECT * FROM past UNION SELECT * FROM by_time) AS due
               ORDER BY priority DESC, due_at, sequence LIMIT p_limit),
claimed AS (
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue || '-dlq' ELSE m.queue END,
    is_dlq = (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) OR m.is_dlq,
    status = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE 1 END,
    attempts = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 0 ELSE m.attempts + 1 END,
    failure_reason = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN 'max_attempts_reached' ELSE m.failure_reason END,
    expires_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now + p_dlq_ttl ELSE m.expires_after END,
    processing_started_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN NULL ELSE GREATEST(p_now, m.updated_at + 1) END,
    process_after = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN p_now ELSE p_now + p_visibility END,
    first_received_at = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.first_received_at
                             ELSE COALESCE(m.first_received_at, p_now) END,
    updated_at = GREATEST(p_now, m.updated_at + 1)
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.queue, m.content, m.attempts, m.processing_started_at, m.priority, m.attributes,
          m.dedup_id, m.sequence, m.received_at, m.first_received_at, m.process_after, m.state, m.status,
          picked.priority AS picked_priority, picked.due_at AS picked_due_at, picked.sequence AS picked_sequence)
SELECT id, queue, content, attempts, processing_started_at, priority, attributes, dedup_id, sequence, received_at,
       first_received_at, process_after, state, status
FROM claimed ORDER BY picked_priority DESC, picked_due_at, picked_sequence;
        RETURN;
    END IF;
    RAISE EXCEPTION 'forq_claim: no such order: %', p_order;
END
$claim$
"""


class PostgreSQLOnly(migrations.RunSQL):
    """SQL run on PostgreSQL alone (``sqlmigrate`` prints it there); nothing on SQLite. Each
    statement is given whole (a list), never split at its semicolons."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


PREVIOUS_FUNCTION = importlib.import_module("forqapp.migrations.0015_postgresql_claim_function").CLAIM_FUNCTION


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0016_lease_index_by_lease_end")]

    operations = [
        migrations.AlterField(
            model_name="queue",
            name="ordering",
            field=models.CharField(blank=True, choices=[("fifo", "FIFO"), ("lifo", "LIFO"), ("due", "by due time")],
                                   max_length=4, null=True),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("process_after__lt", models.F("received_at")), ("status", 0)),
                               fields=["queue", "-priority", "process_after", "sequence"], name="idx_queue_past"),
        ),
        PostgreSQLOnly([CLAIM_FUNCTION], reverse_sql=[PREVIOUS_FUNCTION]),
    ]
