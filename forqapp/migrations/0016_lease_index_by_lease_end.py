"""``idx_leases`` by lease end: (queue, process_after, priority, sequence, status), the leased rows alone.

0014 made it (queue, status, process_after, …) ``WHERE status = 1``. PostgreSQL takes ``status = 1``
from the index's condition and so does not use it as a key: with ``status`` second, a claim's look
for the ended leases of a queue (``process_after <= now``) read every lease of that queue, ended or
not. With 10,000 deliveries in flight that was 73 index pages a claim (a freshly built index) to 129
(one filled by claims), ``EXPLAIN (ANALYZE, BUFFERS)``; now the first page or two. ``status`` stays,
last, so that SQLite still reads a lease's status from the index alone.

On PostgreSQL the index is rebuilt without ``CONCURRENTLY``, in the migration's transaction:
``DROP INDEX`` locks ``messages`` against reads and writes until the migration commits (the new
index holds the leases only, so that is short, but receives, sends and the pages wait meanwhile).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0015_postgresql_claim_function")]

    operations = [
        migrations.RemoveIndex(model_name="message", name="idx_leases"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(condition=models.Q(status=1),
                               fields=["queue", "process_after", "priority", "sequence", "status"], name="idx_leases"),
        ),
    ]
