"""The SQS face's queue tags (TagQueue, UntagQueue, ListQueueTags, CreateQueue's tags), kept in
the queue's row beside its SQS attributes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0021_group_touch_unchanged")]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="sqs_tags",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
