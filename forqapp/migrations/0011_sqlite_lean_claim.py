"""A lighter claim and ack on SQLite (issue 12's speed point). PostgreSQL is unchanged.

SQLite rewrites an index entry whenever an UPDATE names one of the index's columns, even when the
value stays the same, and every rewritten entry is a B-tree page more in each commit. Two changes
take pages out of the claim and the ack, the two writes every message goes through:

- **The redrive moves to a trigger.** A claim that finds a message whose attempts are used up moves
  it to its DLQ instead of delivering it (SQS's redrive). The claim used to say so in its own SET
  (``queue = CASE … END, is_dlq = CASE … END``), so every claim rewrote the message's entry in
  ``idx_for_queue_depth`` (queue, is_dlq). Now the claim marks such a row with the status
  ``REDRIVING`` (9) and ``forq_redrive``, in the same statement, renames its queue and makes it a
  ready dead letter: the status 9 is never seen outside that statement.
- **``idx_expired`` leaves out deliveries.** Its jobs (expired and failed messages) look at ready
  and failed rows only; a leased row sat in it all the same, so a claim moved its entry and the
  ack deleted it. Now it is partial (``status = 0 OR status = 2``): a claim deletes the entry, an
  ack touches nothing there. The queries over leased rows (the stale-lease safety net, in-flight counts) go
  queue by queue through ``idx_for_requeueing`` (queue, status) instead.

Measured on the same table with raw ``sqlite3`` (bench/queues_bench.py prints the figures): a
claim+ack of a message with a priority and attributes takes about a fifth less time.
"""

from django.db import migrations

REDRIVING = 9  # forqapp.store.sqlite.REDRIVING

FORWARDS = [
    f"""CREATE TRIGGER forq_redrive AFTER UPDATE OF status ON messages WHEN NEW.status = {REDRIVING}
BEGIN
    UPDATE messages SET queue = NEW.queue || '-dlq', is_dlq = 1, status = 0 WHERE id = NEW.id;
END""",
    "DROP INDEX idx_expired",
    # ready and failed rows (not "status != 1": SQLite proves an ORM's "status = %s" implies this form)
    "CREATE INDEX idx_expired ON messages (status, is_dlq, expires_after) WHERE status = 0 OR status = 2",
]

BACKWARDS = [
    "DROP TRIGGER forq_redrive",
    "DROP INDEX idx_expired",
    "CREATE INDEX idx_expired ON messages (status, is_dlq, expires_after)",
]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in FORWARDS:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in BACKWARDS:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0010_sqs_queue_attributes")]

    # The model's state is unchanged: the trigger and the partial index are SQLite's storage
    # (as the WITHOUT ROWID table is), and PostgreSQL keeps the index whole.
    operations = [migrations.RunPython(forwards, backwards)]
