"""``forq_staged``: the rows of exactly-once Spark writes until their job publishes them.

They used to wait in ``messages`` under hidden queue names; this table keeps them out of it. On
SQLite it is ``WITHOUT ROWID`` (one B-tree keyed by (token, message_id)), on PostgreSQL keys compare
bytewise; both need raw SQL. Rows staged the old way are dropped: they belonged to jobs that can
no longer publish them (a job in flight during the upgrade fails its commit and can be re-run).
"""

from django.db import migrations, models

SQLITE_TABLE = """
CREATE TABLE forq_staged (
    token         TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    content       TEXT    NOT NULL,
    process_after INTEGER NOT NULL,
    staged_at     INTEGER NOT NULL,
    PRIMARY KEY (token, message_id)
) WITHOUT ROWID"""

POSTGRESQL_TABLE = """
CREATE TABLE forq_staged (
    token         VARCHAR(100) COLLATE "C" NOT NULL,
    message_id    VARCHAR(36)  COLLATE "C" NOT NULL,
    queue         VARCHAR(128) COLLATE "C" NOT NULL,
    content       TEXT   NOT NULL,
    process_after BIGINT NOT NULL,
    staged_at     BIGINT NOT NULL,
    PRIMARY KEY (token, message_id)
)"""


def create_staged(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor in ("sqlite", "postgresql"):
        schema_editor.execute(SQLITE_TABLE if vendor == "sqlite" else POSTGRESQL_TABLE)
        # '~' sorts after every character of a queue name: a range the queue indexes can use
        schema_editor.execute("DELETE FROM messages WHERE queue >= '~stage~' AND queue < '~stagf'")
    else:
        schema_editor.create_model(apps.get_model("forqapp", "StagedMessage"))


def drop_staged(apps, schema_editor):
    # Backwards, the model is already gone from the migration state: drop the table by name.
    schema_editor.execute("DROP TABLE forq_staged")


class Migration(migrations.Migration):
    dependencies = [
        ("forqapp", "0003_auththrottle"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="StagedMessage",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "token", "message_id", blank=True, editable=False, primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("token", models.CharField(max_length=100)),
                        ("message_id", models.CharField(max_length=36)),
                        ("queue", models.CharField(max_length=128)),
                        ("content", models.TextField()),
                        ("process_after", models.BigIntegerField()),
                        ("staged_at", models.BigIntegerField()),
                    ],
                    options={
                        "db_table": "forq_staged",
                    },
                )
            ],
            database_operations=[migrations.RunPython(create_staged, drop_staged)],
        ),
    ]
