"""``send_many``'s usual batch, checked a column at a time (``services._usual_batch``): it must
accept only what the item-by-item path (``services._entry``) accepts and store exactly what that
path stores, in the items' order, on both databases."""

from __future__ import annotations

import gc

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import forqapp
from forqapp import errors, services, store, validation
from forqapp.errors import ForqError
from forqapp.models import Message
from forqapp.services import policies as policy_module
from forqapp.services import produce

from .conftest import refused

NOW = 1_800_000_000_000
LIMIT = 300  # bytes of content, small so that the limit is reached


def policy():
    return policy_module.resolve(None)  # the settings' policy: a queue without a row of its own


def one_by_one(items):
    """What the item-by-item path makes of ``items``: the rows without their ids, or its error."""
    try:
        return [produce._entry("id", "q", item, NOW, policy(), LIMIT)[1:] for item in items]
    except ForqError as e:
        return e.code


# Text that is mostly fine, now and then with one character that is not: what JSON escapes,
# non-ASCII, DEL, a lone surrogate; and the length bounds.
plain_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'),
                     max_size=6)
tricky_text = st.one_of(
    plain_text, plain_text, plain_text,
    st.builds("{}{}{}".format, plain_text, st.sampled_from('"\\\n\t\x00\x7f\x1féЖ€\ud800'), plain_text),
    st.sampled_from(["", "k" * 64, "k" * 65, "v" * 1024, "v" * 1025]),
)
attribute_sets = st.one_of(
    st.none(),
    st.dictionaries(tricky_text, tricky_text, max_size=11),
    st.dictionaries(plain_text.filter(bool), tricky_text, min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=3), min_size=1, max_size=2),
    st.dictionaries(st.one_of(st.integers(0, 3), st.just("k")), st.one_of(st.integers(), st.none(), tricky_text),
                    min_size=1, max_size=2),
    st.just(["not", "a", "dict"]),
)
priorities = st.one_of(st.integers(-1001, 1001), st.integers(-3, 3), st.just(True), st.none(), st.just(1.0),
                       st.just("1"))
contents = st.one_of(st.text(max_size=5), st.just("x" * LIMIT), st.just("x" * (LIMIT + 1)), st.just("é" * 200),
                     st.just(None), st.integers())


valid_items = st.fixed_dictionaries({"content": plain_text}, optional={
    "priority": st.integers(-3, 3),
    "attributes": st.one_of(st.none(), st.dictionaries(plain_text.filter(bool), plain_text, min_size=1, max_size=3)),
})
any_items = st.fixed_dictionaries({}, optional={"content": contents, "priority": priorities, "attributes": attribute_sets})
odd_items = st.one_of(  # a usual item but for one field, or anything
    st.fixed_dictionaries({"content": plain_text, "attributes": st.dictionaries(plain_text.filter(bool), tricky_text,
                                                                                min_size=1, max_size=2)}),
    st.fixed_dictionaries({"content": plain_text, "attributes": st.dictionaries(tricky_text, plain_text,
                                                                                min_size=1, max_size=2)}),
    st.fixed_dictionaries({"content": plain_text, "attributes": attribute_sets}),
    st.fixed_dictionaries({"content": plain_text, "priority": priorities}),
    st.fixed_dictionaries({"content": contents}),
    any_items, contents, st.just({"content": "a", "delay": 5}), st.just({"content": "a", "x": 1}),
)


def with_one_odd(batch, odd, at):
    return [*batch[:at], odd, *batch[at:]]


batches = st.one_of(
    st.lists(valid_items, min_size=1, max_size=8),  # the usual batch
    st.builds(with_one_odd, st.lists(valid_items, max_size=6), odd_items, st.integers(0, 6)),  # and one odd item
    st.lists(contents, min_size=1, max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.dictionaries(tricky_text, tricky_text, min_size=1, max_size=11)),
                       min_size=1, max_size=4))
def test_the_column_check_of_attributes_stores_what_the_item_check_stores(values):
    texts = validation.attributes_many(values)
    try:
        one_by_one = [validation.attributes(v) for v in values]
    except ForqError:
        assert texts is None
        return
    assert texts is None or texts == one_by_one


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches)
def test_the_column_check_takes_only_what_the_item_check_takes_and_stores_the_same(batch):
    columns = produce._usual_batch(batch, LIMIT)
    event("column check" if columns is not None else "item check")
    if columns is None:
        return  # the item-by-item path decides (and raises its exact error)
    rows = produce._batch_rows("q", columns, NOW, policy())
    assert [r[1:] for r in rows] == one_by_one(batch)
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)  # new ids, ascending in the items' order


def test_the_usual_batches_take_the_column_check():
    """The point of it: plain strings, and dicts of content, priority and attributes, never fall
    back to the item-by-item path (a test that would pass with the fast path gone must not)."""
    rich = [{"content": f"m{i}", "priority": i % 21 - 10,
             "attributes": {"tenant": f"t-{i}", "kind": "email", "trace": f"{i:016x}"}} for i in range(50)]
    for batch in (["a", "b", ""], rich, [{"content": "c"}, {"content": "d", "priority": 3}],
                  [{"content": "e", "attributes": None}, {"content": "f", "attributes": {"k": ""}}]):
        assert produce._usual_batch(batch, LIMIT) is not None, batch
    columns = produce._usual_batch(rich, LIMIT)
    assert columns.attributes[0] == '{"tenant":"t-0","kind":"email","trace":"0000000000000000"}'
    # When it needs rows (a queue with a max_length), plain tuples, which the cycle collector
    # stops tracking (forqapp.store.MessageRow)
    rows = produce._batch_rows("q", columns, NOW, policy())
    gc.collect()
    assert {type(r) for r in rows} == {tuple} and not any(map(gc.is_tracked, rows))


@pytest.mark.parametrize("attributes", [
    {"k": 'a"b'}, {"k": "a\\b"}, {"k": "a\nb"}, {"k": "é"}, {"k": "\x7f"}, {"": "v"}, {"k" * 65: "v"},
    {"k": "v" * 1025}, {f"k{i}": "v" for i in range(11)}, {"k": 1}, {1: "v"}, {}, {"k": "\ud800"},
])
def test_attributes_off_the_usual_kind_go_the_checked_way(attributes):
    """Each of these leaves the column check; the item check then stores or refuses it as it
    always did (an escaped or non-ASCII text, an error, or nothing for an empty set)."""
    batch = [{"content": "a", "attributes": {"x": "y"}}, {"content": "b", "attributes": attributes}]
    assert produce._usual_batch(batch, LIMIT) is None


pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_mixed_priorities_are_numbered_in_the_items_order_and_delivered_by_priority():
    items = [{"content": f"m{i}", "priority": p, "attributes": {"i": str(i)}}
             for i, p in enumerate([0, 5, 0, -5, 5, 0, 10])]
    sent = forqapp.send_many("mixed", items)
    rows = {m.id: m for m in Message.objects.filter(queue="mixed")}
    assert [rows[i].content for i in sent] == [f"m{i}" for i in range(7)]
    assert [rows[i].attributes_dict for i in sent] == [{"i": str(i)} for i in range(7)]
    sequences = [rows[i].sequence for i in sent]
    assert sequences == sorted(sequences) and sent == sorted(sent)  # both in the items' order
    received = []
    while (m := forqapp.receive("mixed")) is not None:
        received.append(m.content)
        forqapp.ack(m)
    assert received == ["m6", "m1", "m4", "m0", "m2", "m5", "m3"]


@pytestmark_db
def test_the_usual_batch_is_stored_a_column_at_a_time(monkeypatch):
    """Through Store.insert_batch (no tuple a message), with what send stores and its sequences."""
    st = store.for_alias("default")
    calls = []
    real = type(st).insert_batch

    def spy(self, queue, *args, **kwargs):
        calls.append(queue)
        return real(self, queue, *args, **kwargs)

    monkeypatch.setattr(type(st), "insert_batch", spy)
    forqapp.configure_queue("columns", retention=60)
    items = [{"content": "a", "priority": 3, "attributes": {"k": "v"}}, {"content": "b"}]
    results = services.send_entries("columns", items)
    assert calls == ["columns"]
    stored = {m.id: m for m in Message.objects.filter(queue="columns")}
    assert [(stored[r.id].content, stored[r.id].priority, stored[r.id].attributes_dict, stored[r.id].sequence)
            for r in results] == [("a", 3, {"k": "v"}, results[0].sequence), ("b", 0, {}, results[1].sequence)]
    assert results[1].sequence == results[0].sequence + 1
    m = stored[results[0].id]
    assert m.process_after == m.received_at == m.updated_at and m.expires_after == m.received_at + 60_000
    assert forqapp.send_many("columns", ["c", "d"]) and calls == ["columns"] * 2


@pytestmark_db
def test_send_entries_results_follow_the_items_with_a_max_length():
    forqapp.configure_queue("capped", max_length=4)
    results = services.send_entries("capped", [{"content": "low", "priority": -1}, {"content": "high", "priority": 9},
                                               {"content": "mid"}])
    stored = {m.id: m for m in Message.objects.filter(queue="capped")}
    assert [stored[r.id].content for r in results] == ["low", "high", "mid"]
    assert [stored[r.id].sequence for r in results] == [r.sequence for r in results]
    assert results[0].sequence < results[1].sequence < results[2].sequence
    refused(errors.QUEUE_FULL, forqapp.send_many, "capped", [{"content": "a", "priority": 1}, "b"])
    assert Message.objects.filter(queue="capped").count() == 3


@pytestmark_db
def test_a_batch_refused_by_the_item_check_stores_nothing():
    good = [{"content": "a", "priority": 2, "attributes": {"k": "v"}}] * 3
    refused(errors.BODY_INVALID, forqapp.send_many, "strict", [*good, {"content": "b", "priority": True}])
    refused(errors.CONTENT_EXCEEDS_LIMIT, forqapp.send_many, "strict",
            [*good, {"content": "x" * (produce._hot_setting("FORQ_MAX_CONTENT_BYTES") + 1)}])
    assert not Message.objects.filter(queue="strict").exists()


class Measured(str):
    """A string that reports another length, as a str subclass may: both checks must ask len()."""

    def __len__(self):
        return 5000


@pytest.mark.parametrize("attributes", [{"k": Measured("short")}, {Measured("k"): "v"}])
def test_the_column_check_measures_what_the_item_check_measures(attributes):
    with pytest.raises(ForqError):
        validation.attributes(attributes)
    assert validation.attributes_many([attributes]) is None  # found by an audit: it read the text's length
