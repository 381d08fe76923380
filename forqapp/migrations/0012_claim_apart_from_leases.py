"""The claim stops walking past the deliveries in flight (issue 12: the claim steps over in-flight
rows in its index).

``idx_queue_claim`` held ready rows and leased ones together, by priority and sequence, so that an
ended lease was claimable at once: but with 10,000 deliveries in flight ahead of the first due
message, every claim passed over 10,000 index entries (≈ 0.18× the claims per second of an empty
lead). Now:

- ``idx_queue_claim`` holds **ready rows only** (partial: ``status = 0``), by priority, then
  sequence. A claim deletes its entry; an ack touches nothing there.
- ``idx_for_requeueing`` grows from (queue, status) to (queue, status, process_after, priority,
  sequence): the leased rows of a queue by their lease end, so the ended leases are one range, and
  the in-flight count and the stale-lease job read a range too. A claim rewrote its entry already
  (the status changes), so the claim writes no more index entries than before.

The claim's pick (``forqapp.store.*.PICK``) takes the first due rows of each index and keeps the
first of both, in the same order as before (priority, then sequence; LIFO newest first). The ended
leases are sorted rather than walked to: among the first ``ENDED_AMONG`` (100) to have ended, so
that thousands ended at once (consumers that died holding them) cost a claim no more than that.

On PostgreSQL the two indexes are rebuilt without ``CONCURRENTLY``, in the migration's transaction:
``DROP INDEX`` locks ``messages`` against reads and writes until it commits (seconds for a million
messages), so receives, sends and the pages wait meanwhile.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forqapp", "0011_sqlite_lean_claim")]

    operations = [
        migrations.RemoveIndex(model_name="message", name="idx_for_requeueing"),
        migrations.RemoveIndex(model_name="message", name="idx_queue_claim"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(status=0),
                fields=["queue", "-priority", "sequence", "process_after", "status"],
                name="idx_queue_claim",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                fields=["queue", "status", "process_after", "priority", "sequence"], name="idx_for_requeueing"
            ),
        ),
    ]
