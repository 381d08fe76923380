"""``forq_sink_batches``: the last micro-batch each Spark streaming query published into a queue, so
that a batch Spark replays publishes nothing twice."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('forqapp', '0018_message_groups'),
    ]

    operations = [
        migrations.CreateModel(
            name='SinkBatch',
            fields=[
                ('pk', models.CompositePrimaryKey('queue', 'sink', blank=True, editable=False, primary_key=True, serialize=False)),
                ('queue', models.CharField(max_length=128)),
                ('sink', models.CharField(max_length=100)),
                ('batch_id', models.BigIntegerField()),
                ('committed_at', models.BigIntegerField()),
            ],
            options={
                'db_table': 'forq_sink_batches',
            },
        ),
    ]
