"""SQLite: a grouped message is in one claim index at a time, not two. Since 0018 a message of a group
was also in ``idx_queue_claim`` while ready (though only the claim of the messages without a group
reads it, ``message_group = ''``), and in both ``idx_leases`` and ``idx_group_held`` while leased
(the same columns in the same order). Now:

- ``idx_queue_claim`` holds the messages without a group alone (``message_group = ''``);
- ``idx_group_held`` holds a group's messages delivered before and ready again (a nack's backoff,
  a lease ended by the stale-lease job): ``attempts > 0 AND status = 0``. A group's leased messages
  are read from ``idx_leases``, the group's range (forqapp/store/sqlite.py, ``_leased``).

A grouped send writes one index entry fewer, a grouped claim two and its ack one: fewer pages for
SQLite's WAL at each commit. PostgreSQL keeps 0018's indexes (its statements name none). Django's
model state keeps 0018's definitions, as for 0011's SQLite-only indexes."""

from django.db import migrations

SQLITE_FORWARDS = [
    "DROP INDEX idx_queue_claim",
    "CREATE INDEX idx_queue_claim ON messages (queue, message_group, priority DESC, sequence, process_after, status) "
    "WHERE process_after <= received_at AND status = 0 AND message_group = ''",
    "DROP INDEX idx_group_held",
    "CREATE INDEX idx_group_held ON messages (queue, message_group, process_after, priority, sequence, status) "
    "WHERE attempts > 0 AND status = 0 AND message_group > ''",
]
SQLITE_BACKWARDS = [
    "DROP INDEX idx_queue_claim",
    'CREATE INDEX "idx_queue_claim" ON "messages" ("queue", "message_group", "priority" DESC, "sequence", '
    '"process_after", "status") WHERE ("process_after" <= ("received_at") AND "status" = 0)',
    "DROP INDEX idx_group_held",
    'CREATE INDEX "idx_group_held" ON "messages" ("queue", "message_group", "process_after", "priority", '
    '"sequence", "status") WHERE (("status" = 1 OR ("attempts" > 0 AND "status" = 0)) AND "message_group" > \'\')',
]


def run(statements: list[str]):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements:
                schema_editor.execute(statement)
    return apply


class Migration(migrations.Migration):
    atomic = True
    dependencies = [("forqapp", "0024_group_wake_when_waiting")]

    operations = [migrations.RunPython(run(SQLITE_FORWARDS), run(SQLITE_BACKWARDS))]
