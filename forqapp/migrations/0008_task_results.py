"""The Django Tasks backend's results table (issue 14): one row per task, written by the worker."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0007_flow_control_state_schedules")]

    operations = [
        migrations.CreateModel(
            name="TaskRecord",
            fields=[
                ("id", models.CharField(editable=False, max_length=36, primary_key=True, serialize=False)),
                ("backend", models.CharField(max_length=100)),
                ("queue", models.CharField(max_length=128)),
                ("queue_name", models.CharField(max_length=128)),
                ("task_path", models.CharField(max_length=255)),
                ("priority", models.IntegerField(default=0)),
                ("status", models.CharField(choices=[("READY", "Ready"), ("RUNNING", "Running"), ("FAILED", "Failed"),
                                                     ("SUCCESSFUL", "Successful")], max_length=10)),
                ("content", models.TextField()),
                ("return_value", models.TextField(blank=True, null=True)),
                ("errors", models.TextField(default="[]")),
                ("worker_ids", models.TextField(default="[]")),
                ("enqueued_at", models.BigIntegerField(blank=True, null=True)),
                ("started_at", models.BigIntegerField(blank=True, null=True)),
                ("last_attempted_at", models.BigIntegerField(blank=True, null=True)),
                ("finished_at", models.BigIntegerField(blank=True, null=True)),
                ("updated_at", models.BigIntegerField()),
            ],
            options={
                "verbose_name": "task result",
                "verbose_name_plural": "task results",
                "db_table": "forq_task_results",
                "ordering": ["-updated_at"],
                "indexes": [models.Index(fields=["updated_at"], name="idx_task_results_updated")],
            },
        ),
    ]
