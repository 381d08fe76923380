"""Dead-letter queues as queues of their own, and message move tasks.

- ``forq_queues.dead_letter_queue``: where a queue's dead letters go (any queue's name; NULL: its own
  ``<name>-dlq``, as before). ``messages.dead_letter_source``: the queue a dead letter came from (a
  move task without a destination sends it back there).
- The redrive of a claim (SQLite's trigger ``forq_redrive``, PostgreSQL's ``forq_claim`` and
  ``forq_claim_group``) goes to the queue's ``dead_letter_queue`` and records the source, as the
  ``expired`` and ``failed`` jobs do.
- ``forq_move_tasks``: a move task's durable state (SQS's StartMessageMoveTask), one running task
  per source held by a unique partial index.
"""

import importlib

from django.db import migrations, models

REDRIVING = 9  # forqapp.store.sqlite.REDRIVING
_OWN_DLQ = "(SELECT dead_letter_queue FROM forq_queues WHERE name = NEW.queue)"
SQLITE_TRIGGER = f"""CREATE TRIGGER forq_redrive AFTER UPDATE OF status ON messages WHEN NEW.status = {REDRIVING}
BEGIN
    UPDATE messages SET queue = COALESCE({_OWN_DLQ}, NEW.queue || '-dlq'),
                        is_dlq = COALESCE(substr({_OWN_DLQ}, -4) = '-dlq', 1),
                        dead_letter_source = NEW.queue, status = 0
    WHERE id = NEW.id;
END"""
SQLITE_PREVIOUS_TRIGGER = f"""CREATE TRIGGER forq_redrive AFTER UPDATE OF status ON messages WHEN NEW.status = {REDRIVING}
BEGIN
    UPDATE messages SET queue = NEW.queue || '-dlq', is_dlq = 1, status = 0 WHERE id = NEW.id;
END"""

# forqapp.store.postgresql's CLAIM_FUNCTION and GROUP_CLAIM_FUNCTION as of this migration (frozen: a
# migration installs the same functions whatever the code around it becomes). Their redrive sends a
# used-up message to its queue's ``dead_letter_queue`` (else ``<queue>-dlq``) and remembers where it came from.
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
                        WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, priority, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows
                                    ORDER BY p DESC, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND message_group = '' AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, s
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due ORDER BY priority DESC, sequence LIMIT p_limit)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), m.queue || '-dlq') ELSE m.queue END,
    is_dlq = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE(right((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), 4) = '-dlq', TRUE) ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue ELSE m.dead_letter_source END,
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
                  (SELECT priority FROM messages WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after <= received_at AND process_after <= p_now ORDER BY priority DESC, sequence LIMIT 1),
                  (SELECT MAX(p) FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after DESC, priority, sequence DESC LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 1 AND process_after <= p_now ORDER BY process_after DESC, priority DESC, sequence DESC LIMIT p_ended_among)) AS window_rows)) AS priority), ready AS (
                        SELECT id, sequence FROM messages
                        WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after <= received_at AND process_after <= p_now AND priority = (SELECT priority FROM top)
                        ORDER BY sequence DESC LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after DESC, priority, sequence DESC LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 1 AND process_after <= p_now ORDER BY process_after DESC, priority DESC, sequence DESC LIMIT p_ended_among)) AS window_rows
                                    WHERE p = (SELECT priority FROM top)
                                    ORDER BY s DESC) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND message_group = '' AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY s DESC
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due ORDER BY sequence DESC LIMIT p_limit)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), m.queue || '-dlq') ELSE m.queue END,
    is_dlq = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE(right((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), 4) = '-dlq', TRUE) ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue ELSE m.dead_letter_source END,
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
                        WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_among),
                    by_time AS (SELECT id, priority, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows
                                    ORDER BY p DESC, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND message_group = '' AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, s
                                LIMIT p_among)
               SELECT id FROM (SELECT * FROM ready UNION ALL SELECT * FROM by_time) AS due
                          ORDER BY priority DESC, sequence LIMIT p_among)
                      SELECT id FROM messages WHERE id = ANY(ARRAY(SELECT id FROM candidates))
                      AND (queue = p_queue AND status IN (0, 1)
                           AND process_after <= p_now) IS TRUE
                      ORDER BY random() LIMIT p_limit FOR UPDATE SKIP LOCKED)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), m.queue || '-dlq') ELSE m.queue END,
    is_dlq = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE(right((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), 4) = '-dlq', TRUE) ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue ELSE m.dead_letter_source END,
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
                        SELECT id, priority, process_after, sequence FROM messages WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after <= received_at AND process_after <= p_now
                        ORDER BY priority DESC, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    past AS (
                        SELECT id, priority, process_after, sequence FROM messages WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after < received_at AND process_after <= p_now
                        ORDER BY priority DESC, process_after, sequence LIMIT p_limit FOR UPDATE SKIP LOCKED),
                    by_time AS (SELECT id, priority, process_after, sequence FROM (
                                    SELECT * FROM ((SELECT id AS first_id, priority AS p, process_after AS d, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 0 AND process_after > received_at AND process_after <= p_now ORDER BY process_after, priority DESC, sequence LIMIT p_ended_among) UNION ALL (SELECT id AS first_id, priority AS p, process_after AS d, sequence AS s FROM messages
             WHERE queue = p_queue AND message_group = '' AND status = 1 AND process_after <= p_now ORDER BY process_after, priority, sequence LIMIT p_ended_among)) AS window_rows ORDER BY p DESC, d, s) AS in_order
                                JOIN messages ON id = first_id
                                WHERE queue = p_queue AND message_group = '' AND process_after <= p_now AND (status = 1 OR (status = 0 AND process_after > received_at))
                                ORDER BY p DESC, d, s
                                LIMIT p_limit FOR UPDATE OF messages SKIP LOCKED)
               SELECT id, priority, process_after AS due_at, sequence
               FROM (SELECT * FROM ready UNION SELECT * FROM past UNION SELECT * FROM by_time) AS due
               ORDER BY priority DESC, due_at, sequence LIMIT p_limit),
claimed AS (
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), m.queue || '-dlq') ELSE m.queue END,
    is_dlq = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE(right((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), 4) = '-dlq', TRUE) ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue ELSE m.dead_letter_source END,
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
GROUP_CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION forq_claim_group(p_queue text, p_now bigint, p_limit bigint, p_visibility bigint, p_max bigint, p_dlq_ttl bigint, p_concurrency bigint, p_rate_us bigint, p_looks bigint)
RETURNS TABLE (r_id varchar, r_queue varchar, r_content text, r_attempts integer, r_receipt bigint, r_priority integer, r_attributes text, r_dedup_id varchar, r_sequence bigint, r_received_at bigint, r_first_received_at bigint, r_lease_expires_at bigint, r_state text, r_status integer, r_group varchar)
LANGUAGE plpgsql
AS $claim_group$
DECLARE
    v_tried text[] := '{}';
    v_group text;
    v_rate_next bigint;
    v_held bigint;
    v_best record;
    v_fresh record;
    v_row record;
    v_done bigint := 0;
    v_looks bigint := 0;
    v_claimed_at bigint;
    v_next bigint;
    v_fresh_next bigint;
    v_held_back boolean := false;
    v_got boolean;
BEGIN
    LOOP
        EXIT WHEN v_done >= p_limit OR v_looks >= p_limit + p_looks;
        v_looks := v_looks + 1;
        SELECT name, rate_next_at_us INTO v_group, v_rate_next FROM forq_groups
WHERE queue = p_queue AND eligible_at IS NOT NULL AND eligible_at <= p_now AND name <> ALL(v_tried::text[])
ORDER BY eligible_at, last_claimed_at, name LIMIT 1 FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        IF p_rate_us IS NOT NULL AND v_rate_next > p_now * 1000 THEN
            UPDATE forq_groups SET eligible_at = (v_rate_next + 999) / 1000 WHERE queue = p_queue AND name = v_group;
            v_held_back := true;
            CONTINUE;
        END IF;
        SELECT id, priority, sequence INTO v_best FROM messages
WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '' AND process_after <= p_now
ORDER BY priority DESC, sequence LIMIT 1;
        v_held := 0;
        IF p_concurrency IS NOT NULL THEN
            SELECT COUNT(*) INTO v_held FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
        END IF;
        IF p_concurrency IS NULL OR v_held < p_concurrency THEN
            SELECT id, priority, sequence INTO v_fresh FROM messages
WHERE queue = p_queue AND message_group = v_group AND message_group > '' AND status = 0 AND attempts = 0 AND process_after <= p_now ORDER BY priority DESC, sequence LIMIT 1;
            IF FOUND AND (v_best.id IS NULL OR v_fresh.priority > v_best.priority
                          OR (v_fresh.priority = v_best.priority AND v_fresh.sequence < v_best.sequence)) THEN
                v_best := v_fresh;
            END IF;
        ELSIF v_best.id IS NULL THEN
            v_held_back := true;
        END IF;
        v_claimed_at := 0;
        IF v_best.id IS NOT NULL THEN
            v_got := false;
            FOR v_row IN WITH picked AS (SELECT id FROM messages WHERE id = v_best.id AND queue = p_queue AND message_group = v_group
                AND status IN (0, 1) AND process_after <= p_now FOR UPDATE SKIP LOCKED)
UPDATE messages AS m
SET queue = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), m.queue || '-dlq') ELSE m.queue END,
    is_dlq = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN COALESCE(right((SELECT dq.dead_letter_queue FROM forq_queues AS dq WHERE dq.name = m.queue COLLATE "default"), 4) = '-dlq', TRUE) ELSE m.is_dlq END,
    dead_letter_source = CASE WHEN (p_max > 0 AND m.attempts >= p_max AND NOT m.is_dlq) THEN m.queue ELSE m.dead_letter_source END,
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
          m.message_group LOOP
                v_got := true;
                IF v_row.status = 1 THEN
                    v_done := v_done + 1;
                    v_claimed_at := p_now;
                    IF p_rate_us IS NOT NULL THEN
                        v_rate_next := GREATEST(v_rate_next, p_now * 1000) + p_rate_us;
                    END IF;
                END IF;
                r_id := v_row.id; r_queue := v_row.queue; r_content := v_row.content; r_attempts := v_row.attempts;
                r_receipt := v_row.processing_started_at; r_priority := v_row.priority;
                r_attributes := v_row.attributes; r_dedup_id := v_row.dedup_id; r_sequence := v_row.sequence;
                r_received_at := v_row.received_at; r_first_received_at := v_row.first_received_at;
                r_lease_expires_at := v_row.process_after; r_state := v_row.state; r_status := v_row.status;
                r_group := v_row.message_group;
                RETURN NEXT;
            END LOOP;
            IF NOT v_got THEN  -- locked by a settle in flight: this group waits for the next claim
                v_tried := v_tried || v_group;
                CONTINUE;
            END IF;
        END IF;
        SELECT MIN(process_after) INTO v_next FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
        IF p_concurrency IS NOT NULL THEN
            SELECT COUNT(*) INTO v_held FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
        END IF;
        IF p_concurrency IS NULL OR v_held < p_concurrency THEN
            SELECT id, priority, sequence INTO v_fresh FROM messages
WHERE queue = p_queue AND message_group = v_group AND message_group > '' AND status = 0 AND attempts = 0 AND process_after <= p_now ORDER BY priority DESC, sequence LIMIT 1;
            IF FOUND THEN
                v_fresh_next := p_now;
            ELSE
                SELECT MIN(process_after) INTO v_fresh_next FROM messages WHERE queue = p_queue AND message_group = v_group AND message_group > '' AND status = 0 AND attempts = 0;
            END IF;
            v_next := LEAST(v_next, v_fresh_next);
        END IF;
        IF v_next IS NULL THEN
            IF NOT (EXISTS (SELECT 1 FROM messages WHERE queue = p_queue AND message_group = v_group
                                      AND message_group > '' AND status = 0)
    OR EXISTS (SELECT 1 FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '')) THEN
                DELETE FROM forq_groups WHERE queue = p_queue AND name = v_group;
                CONTINUE;
            END IF;
        ELSE
            v_next := GREATEST(v_next, p_now, (v_rate_next + 999) / 1000);
        END IF;
        UPDATE forq_groups SET eligible_at = v_next, last_claimed_at = GREATEST(last_claimed_at, v_claimed_at),
                               rate_next_at_us = v_rate_next
        WHERE queue = p_queue AND name = v_group;
    END LOOP;
    IF v_done = 0 AND v_held_back THEN
        r_id := NULL;
        RETURN NEXT;
    END IF;
END
$claim_group$
"""

_0018 = importlib.import_module("forqapp.migrations.0018_message_groups")
PostgreSQLOnly = importlib.import_module("forqapp.migrations.0017_due_order").PostgreSQLOnly


def sqlite_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS forq_redrive")
        schema_editor.execute(SQLITE_TRIGGER)


def sqlite_previous_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS forq_redrive")
        schema_editor.execute(SQLITE_PREVIOUS_TRIGGER)


class Migration(migrations.Migration):

    dependencies = [
        ('forqapp', '0022_sqs_queue_tags'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='dead_letter_source',
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.AddField(
            model_name='queue',
            name='dead_letter_queue',
            field=models.CharField(blank=True, max_length=128, null=True),
        ),
        migrations.CreateModel(
            name='MoveTask',
            fields=[
                ('handle', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('source', models.CharField(max_length=128)),
                ('destination', models.CharField(blank=True, max_length=128, null=True)),
                ('rate', models.IntegerField(blank=True, null=True)),
                ('status', models.CharField(choices=[('RUNNING', 'RUNNING'), ('COMPLETED', 'COMPLETED'), ('CANCELLING', 'CANCELLING'), ('CANCELLED', 'CANCELLED'), ('FAILED', 'FAILED')], max_length=16)),
                ('moved', models.BigIntegerField(default=0)),
                ('to_move', models.BigIntegerField(default=0)),
                ('started_at', models.BigIntegerField()),
                ('updated_at', models.BigIntegerField()),
                ('next_at', models.BigIntegerField()),
                ('failure_reason', models.TextField(blank=True, null=True)),
            ],
            options={
                'db_table': 'forq_move_tasks',
                'indexes': [models.Index(fields=['source', 'started_at'], name='idx_move_tasks_source'), models.Index(fields=['status', 'next_at'], name='idx_move_tasks_due')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'RUNNING')), fields=('source',), name='uniq_move_tasks_running')],
            },
        ),
        migrations.RunPython(sqlite_trigger, sqlite_previous_trigger),
        PostgreSQLOnly([CLAIM_FUNCTION], reverse_sql=[_0018.CLAIM_FUNCTION]),
        PostgreSQLOnly([GROUP_CLAIM_FUNCTION], reverse_sql=[_0018.GROUP_CLAIM_FUNCTION]),
    ]
