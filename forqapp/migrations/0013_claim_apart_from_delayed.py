"""The claim stops walking past the messages not yet due.

After migration 0012, ``idx_queue_claim`` held every ready row by priority, then sequence, due or
not: with 10,000 messages delayed (or backed off after a failure: they keep their sequence, at the
head of the queue) ahead of the first due one, every claim passed over 10,000 index entries. Now
the ready rows are split by whether they were due when written:

- ``idx_queue_claim`` keeps the ready rows written due (``process_after <= received_at``: a plain
  send), by priority, then sequence, as before;
- ``idx_queue_timed`` (new) holds the ready rows written to come due later (``process_after >
  received_at``: sent with a delay, backed off, deferred, released, requeued from the DLQ) by the
  time they come due.

A row is in exactly one of them (``received_at`` is the send time and never changes), so a send, a
claim, a nack or an ack writes no more index entries than before. The claim's pick takes the first
due rows of each index (and of the ended leases) and keeps the first of all, in the same order as
before; the rows that came due by time are chosen among the first ``ENDED_AMONG`` (100) of them to
come due, as the ended leases are.

On PostgreSQL the indexes are built without ``CONCURRENTLY``, in the migration's transaction:
``DROP INDEX`` locks ``messages`` against reads and writes until it commits (seconds for a million
messages), so receives, sends and the pages wait meanwhile.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0012_claim_apart_from_leases")]

    operations = [
        migrations.RemoveIndex(model_name="message", name="idx_queue_claim"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(status=0, process_after__lte=models.F("received_at")),
                fields=["queue", "-priority", "sequence", "process_after", "status"],
                name="idx_queue_claim",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(status=0, process_after__gt=models.F("received_at")),
                fields=["queue", "process_after", "-priority", "sequence"],
                name="idx_queue_timed",
            ),
        ),
    ]
