"""PostgreSQL: the message-group trigger function writes a group's row only when its next turn
moves earlier. 0018's wrote it on every grouped insert, settle and delete: a send_many, an ack_many or
a purge of N messages of one group made N versions of one row in one transaction, each found by
walking the ones before it (100,000 messages of one group took about 80 s to send, against about 1 s
now). SQLite (no row versions) is unchanged."""

import importlib

from django.db import migrations

PREVIOUS = importlib.import_module("forqapp.migrations.0018_message_groups").PG_TRIGGERS[0]

TOUCH = """CREATE OR REPLACE FUNCTION forq_group_touch() RETURNS trigger LANGUAGE plpgsql AS $touch$
DECLARE
    v_at bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE forq_groups SET eligible_at = OLD.updated_at - 1
        WHERE queue = OLD.queue AND name = OLD.message_group
          AND (eligible_at IS NULL OR eligible_at > OLD.updated_at - 1);
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.message_group <> '' AND OLD.queue <> NEW.queue THEN
        UPDATE forq_groups SET eligible_at = NEW.updated_at - 1
        WHERE queue = OLD.queue AND name = OLD.message_group
          AND (eligible_at IS NULL OR eligible_at > NEW.updated_at - 1);
    END IF;
    IF NEW.message_group <> '' AND NEW.status IN (0, 1, 2) THEN
        v_at := CASE WHEN NEW.status = 2 THEN NEW.updated_at - 1 ELSE NEW.process_after END;
        INSERT INTO forq_groups (queue, name, eligible_at) VALUES (NEW.queue, NEW.message_group, v_at)
        ON CONFLICT (queue, name) DO UPDATE SET eligible_at = EXCLUDED.eligible_at
        WHERE forq_groups.eligible_at IS NULL OR forq_groups.eligible_at > EXCLUDED.eligible_at;
    END IF;
    RETURN NULL;
END
$touch$"""


def replace(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)
    return run


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0020_staged_group")]

    operations = [
        migrations.RunPython(replace(TOUCH), replace(PREVIOUS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))),
    ]
