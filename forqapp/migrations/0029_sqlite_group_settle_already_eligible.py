"""SQLite: a settle leaves its group's turn alone when the group has been eligible since its last
claim. A group that still has a free slot and a message due after a claim has its turn at the claim's
time (``eligible_at`` = ``last_claimed_at``): every later claim may take it. 0024's delete trigger
moved that turn all the same, 1 ms earlier (the settled message's ``updated_at - 1``), writing the
group's ``forq_groups`` row and its ``idx_groups_turn`` entry at each such ack: two pages more in the
write-ahead log per ack, for a turn that only changed place among the groups eligible in that
millisecond. A group whose turn comes after its last claim (its slots full, waiting for a settle or a
lease's end) is woken as before.

PostgreSQL keeps its trigger."""

import importlib

from django.db import migrations

WAKE_0024 = importlib.import_module("forqapp.migrations.0024_group_wake_when_waiting")

WHEN_0024 = "AND (eligible_at IS NULL OR eligible_at > OLD.updated_at - 1)"
WHEN = "AND (eligible_at IS NULL OR (eligible_at > OLD.updated_at - 1 AND eligible_at > last_claimed_at))"
assert WHEN_0024 in WAKE_0024.SQLITE_DELETE
SQLITE_DELETE = WAKE_0024.SQLITE_DELETE.replace(WHEN_0024, WHEN)


def replace(sql: str):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            schema_editor.execute("DROP TRIGGER forq_group_delete")
            schema_editor.execute(sql)
    return apply


class Migration(migrations.Migration):
    atomic = True
    dependencies = [("forqapp", "0028_drop_nine_argument_claim_group")]

    operations = [migrations.RunPython(replace(SQLITE_DELETE), replace(WAKE_0024.SQLITE_DELETE))]
