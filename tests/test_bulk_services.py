"""The bulk service functions behind the Spark connector's endpoints, on whichever database the
suite runs (the connector's own tests use a server on an SQLite file of their own)."""

from __future__ import annotations

import pytest
from django.db import connection

import forqapp
from forqapp import services, vocab
from forqapp.models import Message, StagedMessage

pytestmark = pytest.mark.django_db(transaction=True)


def test_staged_rows_stay_invisible_until_published():
    services.stage("bulk", "job1-0-0", [{"content": f"a{i}"} for i in range(3)])
    services.stage("bulk", "job1-1-0", [{"content": "b0"}])
    services.stage("bulk", "job1-1-1", [{"content": "retried task's row"}])
    assert forqapp.receive("bulk") is None
    assert services.snapshot_bounds("bulk")["count"] == 0
    assert services.publish_staged([("job1-0-0", "bulk"), ("job1-1-0", "bulk")]) == 4
    assert services.discard_staged([("job1-1-1", "bulk")]) == 1
    assert sorted(m["content"] for m in services.snapshot_page("bulk")) == ["a0", "a1", "a2", "b0"]
    assert not StagedMessage.objects.exists()
    assert services.publish_staged([("job1-0-0", "bulk")]) == 0  # published once, never twice
    assert Message.objects.filter(queue="bulk").count() == 4


def test_publishing_respects_each_queues_max_length_all_or_nothing():
    """Exactly-once Spark writes publish staged rows: a queue's max_length holds for them as for a
    send (they went past it), and a refused publish leaves every queue as it was."""
    forqapp.configure_queue("capped", max_length=10)
    forqapp.send_many("capped", ["old"] * 4)
    services.stage("capped", "job3-0-0", [{"content": f"a{i}"} for i in range(5)])
    services.stage("capped", "job3-1-0", [{"content": f"b{i}"} for i in range(2)])
    services.stage("free", "job3-0-0", [{"content": "f"}])
    with pytest.raises(forqapp.ForqError) as refused:
        services.publish_staged([("job3-0-0", "free"), ("job3-0-0", "capped"), ("job3-1-0", "capped")])
    assert refused.value.code == "queue.full"
    assert Message.objects.filter(queue__in=("capped", "free")).count() == 4  # nothing published
    assert StagedMessage.objects.count() == 8  # still staged: the job discards them
    assert services.publish_staged([("job3-0-0", "free"), ("job3-0-0", "capped")]) == 6  # 4 + 5 + 1 fit
    assert services.queue_info("capped").counts["ready"] == 9


def test_a_streaming_querys_batch_is_published_once_and_a_replay_publishes_nothing():
    """The Spark streaming sink: each micro-batch is recorded with its rows, in one transaction; a
    batch id seen before (or an earlier one) publishes nothing and drops its rows; another query
    (another sink id) or another queue keeps its own record; deleting the queue forgets it."""
    from forqapp.models import SinkBatch

    services.stage("sunk", "q1-b0-0", [{"content": "a"}, {"content": "b"}])
    assert services.publish_sink_batch([("q1-b0-0", "sunk")], "sunk", "q1", 0) == 2
    services.stage("sunk", "q1-b0-replay", [{"content": "a"}, {"content": "b"}])  # Spark replays batch 0
    assert services.publish_sink_batch([("q1-b0-replay", "sunk")], "sunk", "q1", 0) is None
    assert not StagedMessage.objects.exists()  # the replay's rows are dropped at once
    services.stage("sunk", "q2-b0-0", [{"content": "c"}])
    assert services.publish_sink_batch([("q2-b0-0", "sunk")], "sunk", "q2", 0) == 1  # another query
    services.stage("sunk", "q1-b2-0", [{"content": "d"}])
    assert services.publish_sink_batch([("q1-b2-0", "sunk")], "sunk", "q1", 2) == 1
    services.stage("sunk", "q1-b1-0", [{"content": "late"}])
    assert services.publish_sink_batch([("q1-b1-0", "sunk")], "sunk", "q1", 1) is None  # before the last
    assert sorted(Message.objects.filter(queue="sunk").values_list("content", flat=True)) == ["a", "b", "c", "d"]
    assert sorted(SinkBatch.objects.values_list("sink", "batch_id")) == [("q1", 2), ("q2", 0)]
    services.delete_queue("sunk")
    assert not SinkBatch.objects.exists()


def test_staged_rows_keep_their_ids_and_delays_and_old_ones_are_cleaned_up():
    later = services.now_ms() + 60_000
    services.stage("bulk", "job2-0-0", [{"content": "now"}, {"content": "later", "processAfter": later}])
    staged = dict(StagedMessage.objects.values_list("content", "message_id"))
    services.stage("bulk", "job2-1-0", [{"content": "abandoned"}])
    StagedMessage.objects.filter(token="job2-1-0").update(staged_at=services.now_ms() - services.STAGE_TTL_MS - 1)
    assert services.delete_expired_dlq() == 0  # no DLQ message expired; the abandoned row is gone
    assert list(StagedMessage.objects.values_list("token", flat=True).distinct()) == ["job2-0-0"]
    assert services.publish_staged([("job2-0-0", "bulk"), ("job2-1-0", "bulk")]) == 2
    published = {m.content: m for m in Message.objects.filter(queue="bulk")}
    assert {c: m.id for c, m in published.items()} == staged
    assert published["later"].process_after == later and forqapp.receive("bulk").content == "now"


def test_snapshot_pages_by_id_and_changes_nothing():
    ids = forqapp.send_many("snap", [f"m{i}" for i in range(25)])
    bounds = services.snapshot_bounds("snap")
    assert (bounds["count"], bounds["minId"], bounds["maxId"]) == (25, ids[0], ids[-1])
    seen, after = [], ""
    while page := services.snapshot_page("snap", after=after, limit=10):
        seen += [row["id"] for row in page]
        after = page[-1]["id"]
    assert seen == ids
    assert services.snapshot_page("snap", after=ids[4], upto=ids[9])[-1]["id"] == ids[9]
    assert Message.objects.filter(queue="snap", status=0, attempts=0).count() == 25


def test_claim_many_and_ack_many_are_fenced():
    forqapp.send_many("many", ["x", "y", "z"])
    claimed = services.claim_many("many", 10)
    assert [m.content for m in claimed] == ["x", "y", "z"]
    stale = (claimed[0].id, claimed[0].receipt + 1)
    assert services.ack_many("many", [(m.id, m.receipt) for m in claimed[1:]] + [stale]) == 2
    assert list(Message.objects.filter(queue="many").values_list("content", flat=True)) == ["x"]


def test_staged_rows_keep_priority_and_attributes_and_get_sequences_when_published():
    forqapp.send("prio", "before")
    services.stage("prio", "job3-0-0", [
        {"content": "low", "priority": -3},
        {"content": "high", "priority": 8, "attributes": {"source": "spark", "run": "7"}},
        {"content": "plain", "priority": None, "attributes": None},
    ])
    assert services.publish_staged([("job3-0-0", "prio")]) == 3
    got = forqapp.receive_many("prio", 10)
    assert [(m.content, m.priority, m.attributes) for m in got] == [
        ("high", 8, {"source": "spark", "run": "7"}), ("before", 0, {}), ("plain", 0, {}), ("low", -3, {})]
    sequences = {m.content: m.sequence for m in got}  # (PostgreSQL numbers from one database sequence)
    assert sequences["before"] < min(sequences[c] for c in ("low", "high", "plain"))
    assert len(set(sequences.values())) == 4


@pytest.mark.parametrize("item", [
    {"content": "x", "priority": 1001}, {"content": "x", "priority": True},
    {"content": "x", "attributes": {"k": 1}}, {"content": "x", "attributes": {f"k{i}": "v" for i in range(11)}},
])
def test_stage_refuses_what_send_refuses(item):
    with pytest.raises(forqapp.ForqError) as exc:
        services.stage("prio", "job4-0-0", [{"content": "ok"}, item])
    assert exc.value.code == "bad_request.body.invalid"
    with pytest.raises(forqapp.ForqError):
        forqapp.send_many("prio", [{"content": "ok"}, item])
    assert not StagedMessage.objects.exists() and not Message.objects.filter(queue="prio").exists()


def test_snapshot_rows_have_every_column():
    forqapp.send("cols", "a", priority=4, attributes={"k": "v"}, dedup_id="d-1")
    forqapp.send("cols", "b")
    m = forqapp.receive("cols")
    forqapp.nack(m, "it broke")
    rows = {r["content"]: r for r in services.snapshot_page("cols")}
    assert all(list(r) == list(vocab.SNAPSHOT_COLUMNS) for r in rows.values())
    a, b = rows["a"], rows["b"]
    assert (a["priority"], a["attributes"], a["dedup_id"]) == (4, '{"k":"v"}', "d-1")
    assert (a["status"], a["attempts"], a["last_error"]) == (0, 1, "it broke")
    assert a["received_at"] <= a["first_received_at"] <= services.now_ms()
    assert (b["priority"], b["attributes"], b["dedup_id"], b["first_received_at"], b["last_error"]) == (
        0, None, None, None, None)
    assert 0 < a["sequence"] < b["sequence"]


def test_staged_messages_keep_their_group_and_snapshots_show_it():
    services.configure_queue("bulk-g", group_concurrency=1)
    services.stage("bulk-g", "jg-0-0", [{"content": "a1", "group": "t-a"}, {"content": "a2", "group": "t-a"},
                                        {"content": "b1", "group": "t-b"}, {"content": "plain"}])
    # (on SQLite a row with a NUL byte takes the store's other path: the group goes through it too;
    # PostgreSQL refuses NUL in text)
    nul = "nul\x00" if connection.vendor == "sqlite" else "nul"
    services.stage("bulk-g", "jg-1-0", [{"content": nul, "group": "t-c"}])
    assert services.publish_staged([("jg-0-0", "bulk-g"), ("jg-1-0", "bulk-g")]) == 5
    assert not StagedMessage.objects.exists()
    assert forqapp.queue_info("bulk-g").groups == 3
    rows = services.snapshot_page("bulk-g")
    assert sorted((r["content"], r["group"]) for r in rows) == [
        ("a1", "t-a"), ("a2", "t-a"), ("b1", "t-b"), (nul, "t-c"), ("plain", None)]
    claimed = services.claim_many("bulk-g", 10)  # one per group (concurrency 1), and the one without
    assert sorted((m.content, m.group or "") for m in claimed) == [
        ("a1", "t-a"), ("b1", "t-b"), (nul, "t-c"), ("plain", "")]
    with pytest.raises(forqapp.ForqError):
        services.stage("bulk-g", "jg-2-0", [{"content": "x", "group": ""}])
