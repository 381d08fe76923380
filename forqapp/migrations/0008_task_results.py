from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0007_flow_control_state_schedules")]

    operations: list = []
