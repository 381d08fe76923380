"""PostgreSQL: the message-group trigger finds a group's row through its primary key again, whatever
the number of groups. ``messages.queue`` is ``COLLATE "C"`` and ``forq_groups.queue`` the database's
default collation; in ``forq_group_touch`` (0021, 0024) the comparison ``forq_groups.queue =
OLD.queue`` took the message's collation ("C", the one that is not the default), which
``forq_groups_pkey`` (default collation) cannot answer: every ack of a grouped message (and every
move of one to another queue) read the whole of ``forq_groups``, one row per group of every queue.
With 20,000 groups an ack took about 1.5 ms more than with 100 (``bench/groups_bench.py --parts 2``).
Now the comparison names the default collation (equality is the same under both: deterministic
collations), so it is an index probe. SQLite (no collations here) is unchanged."""

import importlib

from django.db import migrations

TOUCH_0024 = importlib.import_module("forqapp.migrations.0024_group_wake_when_waiting").TOUCH

FIND_0024 = "WHERE queue = OLD.queue AND name = OLD.message_group"
assert TOUCH_0024.count(FIND_0024) == 2  # the delete's UPDATE and the move's
TOUCH = TOUCH_0024.replace(FIND_0024, 'WHERE queue = OLD.queue COLLATE "default" AND name = OLD.message_group')


def replace(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)
    return run


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0025_sqlite_group_indexes_apart")]

    operations = [migrations.RunPython(replace(TOUCH), replace(TOUCH_0024))]
