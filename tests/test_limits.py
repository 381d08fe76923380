"""The OpenAPI documents (forqapp/api/openapi*.json) against the one table of limits (forqapp.vocab).

Every bound a document states on a request is read here from the table, so a limit changed in
the table and not in the documents (or the other way round) fails; a bound a document adds that
this test does not know fails too, until it is tied to the table here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from forqapp import conf, vocab
from forqapp.api import meta

BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
                  "minLength", "maxLength", "maxProperties")


def _setting_default(name: str) -> Any:
    return vars(conf.ForqSettings)[name].default


DELAY = vocab.Bounds(0, _setting_default("FORQ_PROCESS_AFTER_MAX_MS") // 1000)  # a delay: the setting's default
LONG_POLL = vocab.Bounds(0, _setting_default("FORQ_LONG_POLL_SECONDS"))


def _range(bounds: vocab.Bounds) -> dict[str, float]:
    return {"minimum": bounds.lo, "maximum": bounds.hi}


def _items(bounds: vocab.Bounds) -> dict[str, float]:
    return {"minItems": bounds.lo, "maxItems": bounds.hi}


def _attributes(prefix: str) -> dict[str, dict[str, float]]:
    return {
        prefix: {"maxProperties": vocab.MAX_ATTRIBUTES},
        f"{prefix}/propertyNames": {"minLength": 1, "maxLength": vocab.ATTRIBUTE_KEY_MAX},
        f"{prefix}/additionalProperties": {"maxLength": vocab.ATTRIBUTE_VALUE_MAX},
    }


S = "components/schemas/"
SNAPSHOT_LIMIT = "paths//api/v1/queues/{queue}/snapshot/get/parameters/3/schema"

# Each bound of a request in the documents: where (file, path in it), and the table's value.
EXPECTED: dict[tuple[str, str], dict[str, float]] = {
    **{("openapi_bulk.json", k): v for k, v in {
        f"{S}BatchRequest/properties/messages": {"maxItems": vocab.BULK_MAX_ITEMS},
        f"{S}StagedRefs/properties/staged": {"maxItems": vocab.BULK_MAX_ITEMS},
        f"{S}PublishRequest/properties/staged": {"maxItems": vocab.BULK_MAX_ITEMS},
        f"{S}PublishRequest/properties/sink/properties/batch": {"minimum": 0, "maximum": 2**63 - 1},
        f"{S}DeliveriesRequest/properties/deliveries": {"maxItems": vocab.BULK_MAX_ITEMS},
        f"{S}ClaimRequest/properties/max": _range(vocab.BULK_CLAIM),
        f"{S}ClaimRequest/properties/wait": _range(vocab.BULK_WAIT_S),
        SNAPSHOT_LIMIT: _range(vocab.BULK_PAGE),
        f"{S}BulkMessage/properties/priority": _range(vocab.PRIORITY),
        **_attributes(f"{S}BulkMessage/properties/attributes"),
    }.items()},
    **{("openapi_v2.json", k): v for k, v in {
        f"{S}V2NewMessage/properties/delay": _range(DELAY),
        f"{S}V2NewMessage/properties/priority": _range(vocab.PRIORITY),
        **_attributes(f"{S}V2NewMessage/properties/attributes"),
        f"{S}V2NewMessage/properties/dedup_window": _range(vocab.DEDUP_WINDOW_S),
        f"{S}V2NewMessage/properties/retention": _range(vocab.RETENTION_S),
        f"{S}V2SendBatch/properties/entries": _items(vocab.V2_ENTRIES),
        f"{S}V2Receive/properties/max_messages": _range(vocab.V2_ENTRIES),
        f"{S}V2Receive/properties/wait": _range(LONG_POLL),
        f"{S}V2Receive/properties/visibility_timeout": _range(vocab.VISIBILITY_S),
        f"{S}V2SettleBatch/properties/entries": _items(vocab.V2_ENTRIES),
        f"{S}V2NackBatch/properties/entries": _items(vocab.V2_ENTRIES),
        f"{S}V2NackBatch/properties/error": {"maxLength": vocab.ERROR_TEXT_MAX},
        f"{S}V2Nack/properties/error": {"maxLength": vocab.ERROR_TEXT_MAX},
        f"{S}V2ChangeVisibilityBatch/properties/entries": _items(vocab.V2_ENTRIES),
        f"{S}V2ChangeVisibilityBatch/properties/visibility_timeout": _range(vocab.VISIBILITY_S),
        f"{S}V2ChangeVisibility/properties/visibility_timeout": _range(vocab.VISIBILITY_S),
        f"{S}V2Policy/properties/max_attempts/anyOf/0": {"minimum": 0, "maximum": vocab.MAX_ATTEMPTS.hi},  # 0: unlimited
        f"{S}V2Policy/properties/backoff/anyOf/0": _items(vocab.BACKOFF_DELAYS),
        f"{S}V2Policy/properties/backoff/anyOf/0/items": _range(vocab.BACKOFF_MS),
        f"{S}V2Policy/properties/backoff/anyOf/1/properties/base_ms": _range(vocab.BACKOFF_BASE_MS),
        f"{S}V2Policy/properties/backoff/anyOf/1/properties/max_ms": _range(vocab.BACKOFF_BASE_MS),
        f"{S}V2Policy/properties/backoff/anyOf/1/properties/jitter": {"minimum": 0, "maximum": 1},
        f"{S}V2Policy/properties/visibility_timeout": _range(vocab.VISIBILITY_S),
        f"{S}V2Policy/properties/retention": _range(vocab.RETENTION_S),
        f"{S}V2Policy/properties/dlq_retention": _range(vocab.RETENTION_S),
        f"{S}V2Policy/properties/max_length": _range(vocab.MAX_LENGTH),
        f"{S}V2Policy/properties/dedup_window": _range(vocab.DEDUP_WINDOW_S),
        f"{S}V2Policy/properties/max_in_flight": _range(vocab.MAX_IN_FLIGHT),
        f"{S}V2Policy/properties/rate/anyOf/1": _range(vocab.RATE_INTERVAL_S),
        f"{S}V2Policy/properties/group_concurrency": _range(vocab.GROUP_CONCURRENCY),
        f"{S}V2Policy/properties/group_rate/anyOf/1": _range(vocab.RATE_INTERVAL_S),
        f"{S}V2Defer/properties/delay": _range(DELAY),
        f"{S}V2ScheduleInput/properties/every": _range(vocab.SCHEDULE_EVERY_S),
        f"{S}V2ScheduleInput/properties/priority": _range(vocab.PRIORITY),
        **_attributes(f"{S}V2ScheduleInput/properties/attributes"),
    }.items()},
}

# Bounds of answers, not of requests: what the server says (a count is at least 0, a receive
# answers at most as many messages as it may ask for), and lengths no limit of the table sets.
ANSWERS = re.compile(r"/responses/|/(V2Sent|V2EntryFailure|V2SendBatchResult|V2SettleBatchResult|V2Message|"
                     r"V2Queue)/|/V2Messages/properties/messages$|/V2ScheduleInput/properties/cron$")


def _bounds(document: Any, path: str = "") -> dict[str, dict[str, float]]:
    """Every schema in ``document`` that states a bound: {its path: {keyword: value}}."""
    found = {}
    if isinstance(document, dict):
        stated = {k: document[k] for k in BOUND_KEYWORDS if k in document}
        if stated:
            found[path.lstrip("/")] = stated
        for key, value in document.items():
            found.update(_bounds(value, f"{path}/{key}"))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found.update(_bounds(value, f"{path}/{i}"))
    return found


def _documents() -> dict[str, dict[str, dict[str, float]]]:
    return {name: _bounds(json.loads((meta.HERE / name).read_text()))
            for name in ("openapi.json", *meta.PARTS)}


@pytest.mark.parametrize(("name", "path"), sorted(EXPECTED))
def test_each_bound_of_a_request_in_the_documents_is_the_table_s(name, path):
    assert _documents()[name].get(path) == EXPECTED[name, path]


def test_the_documents_state_no_bound_the_table_does_not_set():
    unknown = [(name, path, stated) for name, bounds in _documents().items() for path, stated in bounds.items()
               if (name, path) not in EXPECTED and not ANSWERS.search("/" + path)]
    assert unknown == []


def test_the_receive_answers_at_most_what_it_may_ask_for():
    bounds = _documents()["openapi_v2.json"]
    assert bounds[f"{S}V2Messages/properties/messages"] == {"maxItems": vocab.V2_MAX_ENTRIES}


def test_the_dedup_id_pattern_is_the_table_s_length():
    schema = meta.openapi_document()["components"]["schemas"]["V2NewMessage"]["properties"]["dedup_id"]
    assert schema["pattern"] == f"^[!-~]{{1,{vocab.DEDUP_ID_MAX}}}$"


def test_the_group_pattern_is_the_table_s():
    schema = meta.openapi_document()["components"]["schemas"]["V2NewMessage"]["properties"]["group"]
    assert schema["pattern"] == f"^{vocab.GROUP_NAME_PATTERN}$"


def test_the_documents_queue_names_are_the_table_s():
    paths = meta.openapi_document()["paths"]
    v1 = paths["/api/v1/queues/{queue}/messages"]["post"]["parameters"][0]["schema"]["pattern"]
    v2 = paths["/api/v2/queues/{queue}"]["get"]["parameters"][0]["schema"]["pattern"]
    assert v1 == f"^{vocab.V1_QUEUE_NAME_PATTERN}$"
    assert v2 == "^" + vocab.QUEUE_NAME_PATTERN.replace("(?:-dlq)", "(-dlq)") + "$"
