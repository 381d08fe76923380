"""Message groups: a message may carry a group (``messages.message_group``, '' for none), and a
queue a ``group_concurrency`` and a ``group_rate``.

- The four claim indexes lead with (queue, message_group): a claim of the messages without a group
  reads the range ``message_group = ''`` as it read the queue before, and never a grouped row.
- ``idx_group_ready`` holds a group's ready messages in claim order (priority, sequence);
  ``idx_group_held`` the ones that hold a slot of their group (leased, or delivered before and
  waiting again: a nack's backoff), by when each can go.
- ``forq_groups`` holds one row per (queue, group) that has messages: ``eligible_at`` (ms) is the
  earliest time its next claim may come (LonnyMQ's ``next_dequeue_at``), ``last_claimed_at`` breaks
  ties (the group served longest ago first), ``rate_next_at_us`` is its ``group_rate``'s next slot.
  ``idx_groups_turn`` orders a queue's groups by turn, so a claim takes the first eligible group
  in one index probe, whatever the number of groups.
- Triggers keep ``eligible_at`` from being too late: every write of a grouped message other than
  its claim (a send, a settle, a nack's backoff, a lease change, a move to or from a DLQ) brings it
  forward to when that message can go (the claim itself sets it exactly). A value too early costs one
  look: the claim that finds nothing to take in the group sets it right.

On PostgreSQL, ``forq_claim`` passes over grouped messages (``message_group = ''``), and
``forq_claim_group`` claims from groups (the store's grouped claim in one call); their text is
frozen here, as the store generated it.
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
DROP_GROUP_CLAIM_FUNCTION = (
    "DROP FUNCTION IF EXISTS forq_claim_group(text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)")
PREVIOUS_FUNCTION = importlib.import_module("forqapp.migrations.0017_due_order").CLAIM_FUNCTION
PostgreSQLOnly = importlib.import_module("forqapp.migrations.0017_due_order").PostgreSQLOnly

ADD_COLUMN = "ALTER TABLE messages ADD COLUMN message_group varchar(128) DEFAULT '' NOT NULL"
DROP_COLUMN = "ALTER TABLE messages DROP COLUMN message_group"

CREATE_GROUPS = """CREATE TABLE forq_groups (
    queue varchar(128) NOT NULL,
    name varchar(128) NOT NULL,
    eligible_at bigint NULL,
    last_claimed_at bigint NOT NULL DEFAULT 0,
    rate_next_at_us bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name)
)"""
CREATE_TURN_INDEX = """CREATE INDEX idx_groups_turn ON forq_groups (queue, eligible_at, last_claimed_at, name)
    WHERE eligible_at IS NOT NULL"""
DROP_GROUPS = "DROP TABLE forq_groups"

# SQLite: three triggers (an upsert in a trigger needs its SELECT's WHERE, which it has).
SQLITE_TRIGGERS = [
    """CREATE TRIGGER forq_group_insert AFTER INSERT ON messages
WHEN NEW.message_group <> '' AND NEW.status IN (0, 1)
BEGIN
    INSERT INTO forq_groups (queue, name, eligible_at) SELECT NEW.queue, NEW.message_group, NEW.process_after WHERE 1
    ON CONFLICT (queue, name) DO UPDATE SET eligible_at = MIN(COALESCE(eligible_at, excluded.eligible_at), excluded.eligible_at);
END""",
    """CREATE TRIGGER forq_group_update AFTER UPDATE OF status, process_after, queue ON messages
WHEN (NEW.message_group <> '' OR OLD.message_group <> '') AND NOT (OLD.status = 0 AND NEW.status = 1)
BEGIN
    INSERT INTO forq_groups (queue, name, eligible_at)
    SELECT NEW.queue, NEW.message_group, CASE WHEN NEW.status = 2 THEN NEW.updated_at - 1 ELSE NEW.process_after END
    WHERE NEW.message_group <> '' AND NEW.status IN (0, 1, 2)
    ON CONFLICT (queue, name) DO UPDATE SET eligible_at = MIN(COALESCE(eligible_at, excluded.eligible_at), excluded.eligible_at);
    UPDATE forq_groups SET eligible_at = MIN(COALESCE(eligible_at, NEW.updated_at - 1), NEW.updated_at - 1)
    WHERE OLD.queue <> NEW.queue AND queue = OLD.queue AND name = OLD.message_group;
END""",
    """CREATE TRIGGER forq_group_delete AFTER DELETE ON messages WHEN OLD.message_group <> ''
BEGIN
    UPDATE forq_groups SET eligible_at = MIN(COALESCE(eligible_at, OLD.updated_at - 1), OLD.updated_at - 1)
    WHERE queue = OLD.queue AND name = OLD.message_group;
END""",
]
SQLITE_DROP_TRIGGERS = ["DROP TRIGGER forq_group_insert", "DROP TRIGGER forq_group_update",
                        "DROP TRIGGER forq_group_delete"]

PG_TRIGGERS = [
    """CREATE FUNCTION forq_group_touch() RETURNS trigger LANGUAGE plpgsql AS $touch$
DECLARE
    v_at bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE forq_groups SET eligible_at = LEAST(COALESCE(eligible_at, OLD.updated_at - 1), OLD.updated_at - 1)
        WHERE queue = OLD.queue AND name = OLD.message_group;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.message_group <> '' AND OLD.queue <> NEW.queue THEN
        UPDATE forq_groups SET eligible_at = LEAST(COALESCE(eligible_at, NEW.updated_at - 1), NEW.updated_at - 1)
        WHERE queue = OLD.queue AND name = OLD.message_group;
    END IF;
    IF NEW.message_group <> '' AND NEW.status IN (0, 1, 2) THEN
        v_at := CASE WHEN NEW.status = 2 THEN NEW.updated_at - 1 ELSE NEW.process_after END;
        INSERT INTO forq_groups (queue, name, eligible_at) VALUES (NEW.queue, NEW.message_group, v_at)
        ON CONFLICT (queue, name) DO UPDATE
        SET eligible_at = LEAST(COALESCE(forq_groups.eligible_at, EXCLUDED.eligible_at), EXCLUDED.eligible_at);
    END IF;
    RETURN NULL;
END
$touch$""",
    """CREATE TRIGGER forq_group_insert AFTER INSERT ON messages FOR EACH ROW
WHEN (NEW.message_group <> '') EXECUTE FUNCTION forq_group_touch()""",
    """CREATE TRIGGER forq_group_update AFTER UPDATE OF status, process_after, queue ON messages FOR EACH ROW
WHEN ((NEW.message_group <> '' OR OLD.message_group <> '') AND NOT (OLD.status = 0 AND NEW.status = 1))
EXECUTE FUNCTION forq_group_touch()""",
    """CREATE TRIGGER forq_group_delete AFTER DELETE ON messages FOR EACH ROW
WHEN (OLD.message_group <> '') EXECUTE FUNCTION forq_group_touch()""",
]
PG_DROP_TRIGGERS = ["DROP TRIGGER forq_group_insert ON messages", "DROP TRIGGER forq_group_update ON messages",
                    "DROP TRIGGER forq_group_delete ON messages", "DROP FUNCTION forq_group_touch()"]


def triggers(apps, schema_editor):
    statements = SQLITE_TRIGGERS if schema_editor.connection.vendor == "sqlite" else PG_TRIGGERS
    for statement in statements:
        schema_editor.execute(statement)


def drop_triggers(apps, schema_editor):
    statements = SQLITE_DROP_TRIGGERS if schema_editor.connection.vendor == "sqlite" else PG_DROP_TRIGGERS
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0017_due_order")]

    operations = [
        migrations.RemoveIndex(model_name="message", name="idx_queue_claim"),
        migrations.RemoveIndex(model_name="message", name="idx_queue_timed"),
        migrations.RemoveIndex(model_name="message", name="idx_leases"),
        migrations.RemoveIndex(model_name="message", name="idx_queue_past"),
        # (an ALTER TABLE: Django's SQLite editor would copy the whole table for a column with a default)
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL([ADD_COLUMN], reverse_sql=[DROP_COLUMN])],
            state_operations=[migrations.AddField(
                model_name="message", name="message_group",
                field=models.CharField(blank=True, db_default="", default="", max_length=128))],
        ),
        migrations.AddField(model_name="queue", name="group_concurrency",
                            field=models.IntegerField(blank=True, null=True)),
        migrations.AddField(model_name="queue", name="group_rate",
                            field=models.CharField(blank=True, max_length=32, null=True)),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("process_after__lte", models.F("received_at")), ("status", 0)),
                               fields=["queue", "message_group", "-priority", "sequence", "process_after", "status"],
                               name="idx_queue_claim"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("process_after__gt", models.F("received_at")), ("status", 0)),
                               fields=["queue", "message_group", "process_after", "-priority", "sequence"],
                               name="idx_queue_timed"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("process_after__lt", models.F("received_at")), ("status", 0)),
                               fields=["queue", "message_group", "-priority", "process_after", "sequence"],
                               name="idx_queue_past"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("status", 1)),
                               fields=["queue", "message_group", "process_after", "priority", "sequence", "status"],
                               name="idx_leases"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(("message_group__gt", ""), ("status", 0)),
                               fields=["queue", "message_group", "-priority", "sequence", "attempts", "process_after"],
                               name="idx_group_ready"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(models.Q(("status", 1), models.Q(("attempts__gt", 0), ("status", 0)), _connector="OR"),
                                   ("message_group__gt", "")),
                fields=["queue", "message_group", "process_after", "priority", "sequence", "status"],
                name="idx_group_held"),
        ),
        migrations.RunSQL([CREATE_GROUPS, CREATE_TURN_INDEX], reverse_sql=[DROP_GROUPS]),
        migrations.RunPython(triggers, drop_triggers),
        PostgreSQLOnly([CLAIM_FUNCTION], reverse_sql=[PREVIOUS_FUNCTION]),
        PostgreSQLOnly([GROUP_CLAIM_FUNCTION], reverse_sql=[DROP_GROUP_CLAIM_FUNCTION]),
    ]
