from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0008_task_results")]

    operations: list = []
