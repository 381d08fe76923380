"""The login throttle counts the logins whose password is being checked (``pending``) apart from
its failures: a login that does not fail was taken for a failure while it was checked (six correct
logins at once from one address refused the sixth). A database default, so the API-key throttle's
statements, which do not name the column, insert 0."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('forqapp', '0029_sqlite_group_settle_already_eligible'),
    ]

    operations = [
        migrations.AddField(
            model_name='auththrottle',
            name='pending',
            field=models.IntegerField(db_default=0),
        ),
    ]
