from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0009_api_keys")]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="sqs_attributes",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
