"""PostgreSQL: ``forq_claim_group`` with ``p_batch`` (a new overload; the 9-argument function of
migration 0023 stays for processes not yet upgraded), for the SQS face's FIFO receive, which takes
as many messages of one group as it can, in order, as SQS does:

- ``p_batch``: after the claim of a group's first message, its next due messages (held ones due
  again, then never delivered), up to the claim's limit, go to the same receiver, whatever the
  group's slots (``group_concurrency``).
- A group's held messages due again wait while as many of its messages as it has slots are busy
  (held and not due: leased, or waiting out a backoff), so that one receiver takes a batch's
  messages again, the first first, and the group stays in order across receivers. Without batches
  a group never holds more than its slots, and nothing changes.

SQLite runs the same statements from Python (``forqapp.store.sqlite``: GROUP_FOLLOWERS, GROUP_BUSY).
"""

from django.db import migrations

# forqapp.store.postgresql's GROUP_CLAIM_FUNCTION as of this migration (frozen: a migration installs
# the same function whatever the code around it becomes).
GROUP_CLAIM_FUNCTION = """
CREATE OR REPLACE FUNCTION forq_claim_group(p_queue text, p_now bigint, p_limit bigint, p_visibility bigint, p_max bigint, p_dlq_ttl bigint, p_concurrency bigint, p_rate_us bigint, p_looks bigint, p_batch boolean)
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
    v_busy bigint;
    v_busy_next bigint;
    v_blocked boolean;
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
        v_blocked := false;
        IF p_concurrency IS NOT NULL THEN
            SELECT COUNT(*) INTO v_held FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
            IF v_best.id IS NOT NULL AND v_held > p_concurrency THEN
                SELECT COUNT(*), MIN(process_after) INTO v_busy, v_busy_next FROM messages
WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '' AND process_after > p_now;
                IF v_busy >= p_concurrency THEN
                    v_blocked := true;
                    v_held_back := true;
                END IF;
            END IF;
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
        IF v_best.id IS NOT NULL AND NOT v_blocked THEN
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
            IF p_batch AND p_rate_us IS NULL AND v_claimed_at > 0 AND v_done < p_limit THEN
                FOR v_row IN WITH picked AS (SELECT id FROM messages WHERE queue = p_queue AND message_group = v_group AND message_group > ''
                AND status IN (0, 1) AND process_after <= p_now AND id <> v_best.id
                ORDER BY priority DESC, sequence LIMIT (p_limit - v_done) FOR UPDATE SKIP LOCKED)
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
            END IF;
        END IF;
        SELECT MIN(process_after) INTO v_next FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
        IF p_concurrency IS NOT NULL THEN
            SELECT COUNT(*) INTO v_held FROM messages WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '';
            IF v_held > p_concurrency THEN
                SELECT COUNT(*), MIN(process_after) INTO v_busy, v_busy_next FROM messages
WHERE queue = p_queue AND message_group = v_group AND (status = 1 OR (attempts > 0 AND status = 0)) AND message_group > '' AND process_after > p_now;
                IF v_busy >= p_concurrency THEN
                    v_next := v_busy_next;
                END IF;
            END IF;
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

DROP = ("DROP FUNCTION IF EXISTS forq_claim_group(text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, "
        "bigint, boolean)")


def postgresql(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)
    return run


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0026_pg_group_touch_collation")]

    operations = [migrations.RunPython(postgresql(GROUP_CLAIM_FUNCTION), postgresql(DROP))]
