"""Scoped API keys (issue 16): the keys, their secrets sealed (AES-256-GCM), and their audit log."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0008_task_results")]

    operations = [
        migrations.CreateModel(
            name="ApiKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                ("access_key_id", models.CharField(max_length=32, unique=True)),
                ("secret_sealed", models.TextField()),
                ("grants", models.JSONField(default=list)),
                ("enabled", models.BooleanField(default=True)),
                ("created_at", models.BigIntegerField()),
                ("created_by", models.CharField(blank=True, default="", max_length=150)),
                ("expires_at", models.BigIntegerField(blank=True, null=True)),
                ("revoked_at", models.BigIntegerField(blank=True, null=True)),
                ("rotated_at", models.BigIntegerField(blank=True, null=True)),
                ("last_used_at", models.BigIntegerField(blank=True, null=True)),
            ],
            options={"verbose_name": "API key", "db_table": "forq_api_keys", "ordering": ("name",)},
        ),
        migrations.CreateModel(
            name="KeyEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("action", models.CharField(max_length=20)),
                ("actor", models.CharField(max_length=150)),
                ("via", models.CharField(max_length=10)),
                ("at", models.BigIntegerField()),
                ("detail", models.TextField(blank=True, default="")),
                ("key", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="events",
                                          to="forqapp.apikey")),
            ],
            options={
                "verbose_name": "API key event",
                "db_table": "forq_api_key_events",
                "ordering": ("-at", "-id"),
                "indexes": [models.Index(fields=["key", "at"], name="forq_key_events_key_at")],
            },
        ),
    ]
