"""A settle wakes a message's group only when the group has a ready message left: the one whose slot it
frees. 0018's delete trigger brought the group's turn forward on every ack of a grouped message,
though a group whose last message went has nothing to give (its row now waits for its turn, or the
maintenance job's sweep of groups without messages, to go): an ack of such a group wrote its
``forq_groups`` row and two pages of ``idx_groups_turn`` for nothing, and SQLite a WAL frame for each.
A group with ready messages is woken as before (its turn no later than the settle), so that
``group_concurrency`` lets its next message go at once."""

import importlib

from django.db import migrations

GROUPS_0018 = importlib.import_module("forqapp.migrations.0018_message_groups")
TOUCH_0021 = importlib.import_module("forqapp.migrations.0021_group_touch_unchanged").TOUCH

# The group's ready messages: idx_group_ready's range of the group (``likelihood`` tells SQLite to read
# the group's range, not every group's of the queue: see forqapp/store/sqlite.py, GROUPED).
HAS_READY = ("EXISTS (SELECT 1 FROM messages WHERE queue = OLD.queue AND message_group = OLD.message_group "
             "AND {grouped} AND status = 0)")

SQLITE_HAS_READY = HAS_READY.format(grouped="likelihood(message_group > '', 0.99)")
SQLITE_DELETE = f"""CREATE TRIGGER forq_group_delete AFTER DELETE ON messages WHEN OLD.message_group <> ''
BEGIN
    UPDATE forq_groups SET eligible_at = OLD.updated_at - 1
    WHERE queue = OLD.queue AND name = OLD.message_group
      AND (eligible_at IS NULL OR eligible_at > OLD.updated_at - 1)
      AND {SQLITE_HAS_READY};
END"""
SQLITE_DELETE_0018 = next(t for t in GROUPS_0018.SQLITE_TRIGGERS if "forq_group_delete" in t)

PG_DELETE_0021 = """        UPDATE forq_groups SET eligible_at = OLD.updated_at - 1
        WHERE queue = OLD.queue AND name = OLD.message_group
          AND (eligible_at IS NULL OR eligible_at > OLD.updated_at - 1);"""
assert PG_DELETE_0021 in TOUCH_0021
PG_HAS_READY = HAS_READY.format(grouped="message_group > ''")
TOUCH = TOUCH_0021.replace(PG_DELETE_0021, PG_DELETE_0021[:-1] + f"\n          AND {PG_HAS_READY};")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER forq_group_delete")
        schema_editor.execute(SQLITE_DELETE)
    elif schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TOUCH)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER forq_group_delete")
        schema_editor.execute(SQLITE_DELETE_0018)
    elif schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TOUCH_0021)


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0023_dead_letter_queues")]

    operations = [migrations.RunPython(forwards, backwards)]
