from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0009_api_keys")]

    operations: list = []
