"""PostgreSQL: drop ``forq_claim_group``'s 9-argument overload (migrations 0018 and 0023), which
migration 0027 kept beside its ``p_batch`` one for the processes not yet upgraded. Since 0027 the
store calls the 10-argument function alone (``forqapp.store.postgresql``: CALL_CLAIM_GROUP,
CALL_CLAIM_THEN_GROUPS), so a process of this code never needs the old one; a process older than
0027's code, still running against the database, fails its grouped claims from here on (upgrade
every process first). Back: 0023's function again, as it was. SQLite: nothing (its claim is Python's).
"""

import importlib

from django.db import migrations

_0023 = importlib.import_module("forqapp.migrations.0023_dead_letter_queues")
PostgreSQLOnly = importlib.import_module("forqapp.migrations.0017_due_order").PostgreSQLOnly

DROP_NINE_ARGUMENTS = ("DROP FUNCTION IF EXISTS forq_claim_group(text, bigint, bigint, bigint, bigint, bigint, "
                       "bigint, bigint, bigint)")


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0027_group_batch")]

    operations = [PostgreSQLOnly([DROP_NINE_ARGUMENTS], reverse_sql=[_0023.GROUP_CLAIM_FUNCTION])]
