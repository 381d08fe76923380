"""A send writes one index entry fewer: the ready rows leave ``idx_for_requeueing``.

``idx_for_requeueing`` (queue, status, process_after, priority, sequence) held every row, though
only its leased rows were ever looked up in it (the ended leases a claim takes, the live ones a
queue's concurrency limit counts, the stale-lease job). Each send wrote an entry there too, and with
priorities those entries went in by (process_after, priority): not at the index's end but at as many
places as a batch has priorities, which costs SQLite a B-tree split where an append would do. Now:

- ``idx_leases`` (queue, status, process_after, priority, sequence) holds the leased rows alone
  (``status = 1``; the column kept so that SQLite reads the ended leases from the index alone). A
  send writes nothing there; a claim adds the entry, an ack removes it.
- ``idx_expired`` (the jobs' index: expired and failed messages) holds the ready and failed rows on
  PostgreSQL too (SQLite's has since 0011): a claim and an ack write nothing there.

The UI counts a queue's messages through the index each kind lives in. Measured with raw
``sqlite3`` on the same table (bench/queues_bench.py prints it): ``send_many`` of messages with
priorities and attributes about 1.5x as fast.

On PostgreSQL the indexes are built without ``CONCURRENTLY``, in the migration's transaction:
``DROP INDEX`` locks ``messages`` against reads and writes until it commits (seconds for a million
messages), so receives, sends and the pages wait meanwhile.
"""

from django.db import migrations, models

# idx_expired: SQLite's is partial already (0011, the same condition); PostgreSQL's becomes so.
PARTIAL_EXPIRED = [
    "DROP INDEX idx_expired",
    "CREATE INDEX idx_expired ON messages (status, is_dlq, expires_after) WHERE status = 0 OR status = 2",
]
WHOLE_EXPIRED = [
    "DROP INDEX idx_expired",
    "CREATE INDEX idx_expired ON messages (status, is_dlq, expires_after)",
]


def expired_forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in PARTIAL_EXPIRED:
            schema_editor.execute(statement)


def expired_backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in WHOLE_EXPIRED:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0013_claim_apart_from_delayed")]

    operations = [
        migrations.RemoveIndex(model_name="message", name="idx_for_requeueing"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(status=1),
                               fields=["queue", "status", "process_after", "priority", "sequence"], name="idx_leases"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="message", name="idx_expired"),
                migrations.AddIndex(
                    model_name="message",
                    index=models.Index(condition=models.Q(status=0) | models.Q(status=2),
                                       fields=["status", "is_dlq", "expires_after"], name="idx_expired"),
                ),
            ],
            database_operations=[migrations.RunPython(expired_forwards, expired_backwards)],
        ),
    ]
