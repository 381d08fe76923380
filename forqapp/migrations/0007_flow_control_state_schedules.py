"""Flow control, saved state and schedules (issue 13).

- ``forq_queues`` gains ``max_in_flight``, ``rate`` (policy) and ``rate_next_at_us`` (the rate
  limit's state: when the next claim may happen).
- ``messages`` gains ``state``: a deferred message's saved progress. Raw SQL (a ``WITHOUT ROWID``
  table on SQLite, which Django's table rebuild would not keep).
- ``forq_schedules``: periodic messages.
"""

from django.db import migrations, models


def forwards(apps, schema_editor):
    schema_editor.execute("ALTER TABLE messages ADD COLUMN state TEXT")


def backwards(apps, schema_editor):
    schema_editor.execute("ALTER TABLE messages DROP COLUMN state")


class Migration(migrations.Migration):
    dependencies = [
        ("forqapp", "0006_queues_priorities_dedup"),
    ]

    operations = [
        migrations.AddField("queue", "max_in_flight", models.IntegerField(blank=True, null=True)),
        migrations.AddField("queue", "rate", models.CharField(blank=True, max_length=32, null=True)),
        migrations.AddField("queue", "rate_next_at_us", models.BigIntegerField(db_default=0, default=0)),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddField("message", "state", models.TextField(blank=True, null=True))],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=128)),
                ("content", models.TextField()),
                ("cron", models.CharField(blank=True, max_length=200, null=True)),
                ("every_ms", models.BigIntegerField(blank=True, null=True)),
                (
                    "catch_up",
                    models.CharField(
                        choices=[("skip", "skip"), ("one", "one"), ("all", "all")], default="one", max_length=4
                    ),
                ),
                ("priority", models.IntegerField(default=0)),
                ("attributes", models.TextField(blank=True, null=True)),
                ("paused", models.BooleanField(default=False)),
                ("next_run_at", models.BigIntegerField()),
                ("last_run_at", models.BigIntegerField(blank=True, null=True)),
                ("created_at", models.BigIntegerField()),
                ("updated_at", models.BigIntegerField()),
            ],
            options={
                "db_table": "forq_schedules",
                "ordering": ["name"],
                "indexes": [models.Index(fields=["next_run_at"], name="idx_schedules_next_run")],
            },
        ),
    ]
