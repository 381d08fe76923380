"""Queues become first-class and messages SQS-grade (issue 12).

- ``forq_queues``: one row per queue, its policy (NULL fields follow the global settings) and, on
  SQLite, its sequence counter. Filled here with every queue that has messages.
- ``forq_dedup``: deduplication ids and the message each one answers, until their window ends.
- ``messages`` gains ``priority``, ``attributes``, ``dedup_id``, ``sequence`` and
  ``first_received_at``. Existing messages keep everything and get sequence numbers in the order
  they were received (so their FIFO order is unchanged); each queue's counter starts after them.
- A message in flight keeps its lease: before 0006 a lease ended ``FORQ_VISIBILITY_TIMEOUT_MS``
  after ``processing_started_at`` (heartbeats renewed that); now ``process_after`` holds the lease
  end, so it is set to that.
- The claim index becomes ``(queue, priority DESC, sequence, process_after)`` over ready *and*
  processing rows: a processing row's ``process_after`` is its lease end, so an expired lease is
  claimable at once, by the same indexed statement.
- PostgreSQL draws sequence numbers from one database sequence (no per-queue row lock on produce).
- ``forq_staged`` gains ``priority`` and ``attributes`` (Spark's writer may set them).

The column changes are raw SQL: ``messages`` and ``forq_staged`` are ``WITHOUT ROWID`` tables on
SQLite, which Django's table rebuild would not keep.
"""

from django.db import migrations, models

ADD_COLUMNS = [
    "ALTER TABLE messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE messages ADD COLUMN attributes TEXT",
    "ALTER TABLE messages ADD COLUMN dedup_id VARCHAR(128)",
    "ALTER TABLE messages ADD COLUMN sequence BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE messages ADD COLUMN first_received_at BIGINT",
    "ALTER TABLE forq_staged ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE forq_staged ADD COLUMN attributes TEXT",
]

# Existing messages are numbered in the order they were received (ids break ties: UUIDv7, time
# ordered), across all queues: each queue's numbers increase, DLQ messages included.
NUMBER_EXISTING = """
UPDATE messages SET sequence = numbered.n
FROM (SELECT id, row_number() OVER (ORDER BY received_at, id) AS n FROM messages) AS numbered
WHERE messages.id = numbered.id"""

# A DLQ's messages count with their regular queue (``emails-dlq`` → ``emails``).
FILL_QUEUES = """
INSERT INTO forq_queues (name, paused, last_sequence, created_at, updated_at)
SELECT CASE WHEN is_dlq THEN substr(queue, 1, length(queue) - 4) ELSE queue END AS name,
       FALSE, MAX(sequence), MIN(received_at), MAX(updated_at)
FROM messages
GROUP BY CASE WHEN is_dlq THEN substr(queue, 1, length(queue) - 4) ELSE queue END"""

CLAIM_INDEX = [
    "DROP INDEX idx_queue_ready_for_consuming",
    # status last: a claim passes over leased and delayed rows ahead of it from the index alone
    "CREATE INDEX idx_queue_claim ON messages (queue, priority DESC, sequence, process_after, status)"
    " WHERE status IN (0, 1)",
]

KEEP_LEASES = "UPDATE messages SET process_after = processing_started_at + %s WHERE status = 1"

POSTGRESQL_SEQUENCE = [
    "CREATE SEQUENCE forq_message_sequence AS BIGINT",
    "SELECT setval('forq_message_sequence', COALESCE((SELECT MAX(sequence) FROM messages), 0) + 1, false)",
]


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"forqapp supports SQLite and PostgreSQL, not {vendor}")
    from forqapp.conf import forq_settings

    statements = [*ADD_COLUMNS, NUMBER_EXISTING, FILL_QUEUES]
    for sql in statements:
        schema_editor.execute(sql)
    schema_editor.execute(KEEP_LEASES, (int(forq_settings.FORQ_VISIBILITY_TIMEOUT_MS),))
    for sql in CLAIM_INDEX + (POSTGRESQL_SEQUENCE if vendor == "postgresql" else []):
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    schema_editor.execute("DROP INDEX idx_queue_claim")
    schema_editor.execute(
        "CREATE INDEX idx_queue_ready_for_consuming ON messages (queue, status, received_at, process_after)"
        " WHERE status = 0"
    )
    for column in ("priority", "attributes", "dedup_id", "sequence", "first_received_at"):
        schema_editor.execute(f"ALTER TABLE messages DROP COLUMN {column}")
    for column in ("priority", "attributes"):
        schema_editor.execute(f"ALTER TABLE forq_staged DROP COLUMN {column}")
    if vendor == "postgresql":
        schema_editor.execute("DROP SEQUENCE forq_message_sequence")


class Migration(migrations.Migration):
    dependencies = [
        ("forqapp", "0005_message_last_error_lease"),
    ]

    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("name", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("max_attempts", models.IntegerField(blank=True, null=True)),
                ("backoff", models.TextField(blank=True, null=True)),
                ("visibility_timeout_ms", models.BigIntegerField(blank=True, null=True)),
                ("retention_ms", models.BigIntegerField(blank=True, null=True)),
                ("dlq_retention_ms", models.BigIntegerField(blank=True, null=True)),
                ("max_length", models.BigIntegerField(blank=True, null=True)),
                (
                    "ordering",
                    models.CharField(
                        blank=True, choices=[("fifo", "FIFO"), ("lifo", "LIFO")], max_length=4, null=True
                    ),
                ),
                ("dedup_window_ms", models.BigIntegerField(blank=True, null=True)),
                ("paused", models.BooleanField(default=False)),
                ("last_sequence", models.BigIntegerField(default=0)),
                ("created_at", models.BigIntegerField()),
                ("updated_at", models.BigIntegerField()),
            ],
            options={
                "db_table": "forq_queues",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="DedupEntry",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue", "dedup_id", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("queue", models.CharField(max_length=128)),
                ("dedup_id", models.CharField(max_length=128)),
                ("message_id", models.CharField(max_length=36)),
                ("expires_at", models.BigIntegerField()),
            ],
            options={
                "db_table": "forq_dedup",
                "indexes": [models.Index(fields=["expires_at"], name="idx_dedup_expires")],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField("message", "priority", models.IntegerField(default=0)),
                migrations.AddField("message", "attributes", models.TextField(blank=True, null=True)),
                migrations.AddField(
                    "message", "dedup_id", models.CharField(blank=True, max_length=128, null=True)
                ),
                migrations.AddField("message", "sequence", models.BigIntegerField(default=0)),
                migrations.AddField("message", "first_received_at", models.BigIntegerField(blank=True, null=True)),
                migrations.RemoveIndex("message", "idx_queue_ready_for_consuming"),
                migrations.AddIndex(
                    "message",
                    models.Index(
                        fields=["queue", "-priority", "sequence", "process_after", "status"],
                        condition=models.Q(status__in=[0, 1]),
                        name="idx_queue_claim",
                    ),
                ),
                migrations.AddField("stagedmessage", "priority", models.IntegerField(default=0)),
                migrations.AddField("stagedmessage", "attributes", models.TextField(blank=True, null=True)),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
