"""``forq_staged.message_group``: a staged (exactly-once Spark) message keeps its group when published."""


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('forqapp', '0019_sink_batches'),
    ]

    operations = [
        migrations.AddField(
            model_name='stagedmessage',
            name='message_group',
            field=models.CharField(blank=True, db_default='', default='', max_length=128),
        ),
    ]
