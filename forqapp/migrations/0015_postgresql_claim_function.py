"""A receive on PostgreSQL runs its claim through ``forq_claim``, a PL/pgSQL function, planned once
per connection rather than at each call.

The claim (``forqapp.store.postgresql.CLAIM``) is one statement of three parts; PostgreSQL replanned
it at each receive once the table had statistics, and planning it took longer than running it. The
function holds the same statements and carries ``plan_cache_mode = force_generic_plan`` for itself:
PL/pgSQL keeps each statement's plan for the session, the generic plan from the first call, and the
session's own setting is untouched. Measured: 0.26-0.31 ms a claim against 0.55-0.58 ms.

The function's text is frozen here, as the store generated it when this migration was written
(``forqapp.store.postgresql.CLAIM_FUNCTION``; ``tests/test_postgres.py`` compares the installed
function with the store's): a later change to the claim comes with a migration of its own. Nothing is
done on SQLite, whose statements are prepared once per connection already.
"""

from django.db import migrations

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
    RAISE EXCEPTION 'forq_claim: no such order: %', p_order;
END
$claim$
"""

DROP_CLAIM_FUNCTION = "DROP FUNCTION IF EXISTS forq_claim(text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint)"


class PostgreSQLOnly(migrations.RunSQL):
    """SQL run on PostgreSQL alone (``sqlmigrate`` prints it there); nothing on SQLite. Each
    statement is given whole (a list), never split at its semicolons."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0014_leases_apart")]

    operations = [PostgreSQLOnly([CLAIM_FUNCTION], reverse_sql=[DROP_CLAIM_FUNCTION])]
