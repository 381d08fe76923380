"""The ``messages`` table, as Forq creates it.

On SQLite the table is ``WITHOUT ROWID`` (ids are time-ordered UUIDv7 text, a good B-tree key) and
the file is switched to WAL, which persists in the file; both need raw SQL, and ``PRAGMA
journal_mode`` cannot run inside a transaction, hence ``atomic = False``. Every other database
gets the same table and indexes from Django's schema editor.
"""

from django.db import migrations, models

SQLITE_TABLE = """
CREATE TABLE messages (
    id                    TEXT    NOT NULL PRIMARY KEY,
    queue                 TEXT    NOT NULL,
    is_dlq                BOOLEAN NOT NULL DEFAULT FALSE,
    content               TEXT    NOT NULL,
    status                INTEGER NOT NULL DEFAULT 0,
    attempts              INTEGER NOT NULL DEFAULT 0,
    process_after         INTEGER NOT NULL,
    processing_started_at INTEGER,
    failure_reason        TEXT,
    received_at           INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    expires_after         INTEGER NOT NULL
) WITHOUT ROWID"""

SQLITE_INDEXES = [
    "CREATE INDEX idx_queue_ready_for_consuming ON messages (queue, status, received_at, process_after)"
    " WHERE status = 0",
    "CREATE INDEX idx_for_queue_depth ON messages (queue, is_dlq)",
    "CREATE INDEX idx_expired ON messages (status, is_dlq, expires_after)",
    "CREATE INDEX idx_for_requeueing ON messages (queue, status)",
]


# PostgreSQL: the same table and indexes, with ids and queue names compared bytewise (COLLATE "C":
# time order for UUIDv7 text, faster than a locale) and no ``varchar_pattern_ops`` copies of them
# (Django adds those for indexed CharFields; nothing here uses LIKE). A queue table is rewritten all
# the time: autovacuum is told to clean it after 1% of changes, not 20%.
POSTGRESQL_TABLE = """
CREATE TABLE messages (
    id                    VARCHAR(36)  COLLATE "C" NOT NULL PRIMARY KEY,
    queue                 VARCHAR(128) COLLATE "C" NOT NULL,
    is_dlq                BOOLEAN NOT NULL DEFAULT FALSE,
    content               TEXT    NOT NULL,
    status                INTEGER NOT NULL DEFAULT 0,
    attempts              INTEGER NOT NULL DEFAULT 0,
    process_after         BIGINT  NOT NULL,
    processing_started_at BIGINT,
    failure_reason        TEXT,
    received_at           BIGINT  NOT NULL,
    updated_at            BIGINT  NOT NULL,
    expires_after         BIGINT  NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02)"""


def create_messages(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        if not schema_editor.connection.is_in_memory_db():
            schema_editor.execute("PRAGMA journal_mode=WAL")
        schema_editor.execute(SQLITE_TABLE)
        for sql in SQLITE_INDEXES:
            schema_editor.execute(sql)
    elif vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_TABLE)
        for sql in SQLITE_INDEXES:  # the same statements, partial index included
            schema_editor.execute(sql)
    else:
        schema_editor.create_model(apps.get_model("forqapp", "Message"))


def drop_messages(apps, schema_editor):
    # Backwards, the model is already gone from the migration state: drop the table by name.
    schema_editor.execute("DROP TABLE messages")


class Migration(migrations.Migration):
    initial = True
    atomic = False

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Message",
                    fields=[
                        (
                            "id",
                            models.CharField(
                                editable=False,
                                max_length=36,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("queue", models.CharField(max_length=128)),
                        ("is_dlq", models.BooleanField(default=False)),
                        ("content", models.TextField()),
                        (
                            "status",
                            models.IntegerField(
                                choices=[
                                    (0, "ready"),
                                    (1, "processing"),
                                    (2, "failed"),
                                ],
                                default=0,
                            ),
                        ),
                        ("attempts", models.IntegerField(default=0)),
                        ("process_after", models.BigIntegerField()),
                        (
                            "processing_started_at",
                            models.BigIntegerField(blank=True, null=True),
                        ),
                        ("failure_reason", models.TextField(blank=True, null=True)),
                        ("received_at", models.BigIntegerField()),
                        ("updated_at", models.BigIntegerField()),
                        ("expires_after", models.BigIntegerField()),
                    ],
                    options={
                        "db_table": "messages",
                        "ordering": ["received_at"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("status", 0)),
                                fields=[
                                    "queue",
                                    "status",
                                    "received_at",
                                    "process_after",
                                ],
                                name="idx_queue_ready_for_consuming",
                            ),
                            models.Index(
                                fields=["queue", "is_dlq"], name="idx_for_queue_depth"
                            ),
                            models.Index(
                                fields=["status", "is_dlq", "expires_after"],
                                name="idx_expired",
                            ),
                            models.Index(
                                fields=["queue", "status"], name="idx_for_requeueing"
                            ),
                        ],
                    },
                )
            ],
            database_operations=[migrations.RunPython(create_messages, drop_messages)],
        ),
        migrations.CreateModel(
            name="DeadLetter",
            fields=[],
            options={
                "verbose_name": "dead letter",
                "verbose_name_plural": "dead letters",
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("forqapp.message",),
        ),
    ]
