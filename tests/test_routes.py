"""The API's routes against its OpenAPI document, both ways, and the document against the server.

* Every route of ``forqapp.api.urls`` is documented, with its methods, and every documented path
  and method is routed.
* Route order cannot swallow a literal path: each one resolves to its own view.
* A bounded, deterministic schemathesis run against a real ``forq_serve``: no request the document
  allows (or, negatively, forbids) gets a 500, and answers conform to the document (status codes,
  content types, bodies).
"""

from __future__ import annotations

import re

import pytest
import schemathesis
from django.urls import URLPattern, resolve
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from forqapp import errors
from forqapp.api import meta, plumbing, urls

from .conftest import METRICS_SECRET, SECRET, start_server, stop_server

HTTP_METHODS = {"get", "head", "post", "put", "patch", "delete", "options", "trace"}
# Views that are not endpoints themselves, and the endpoint that answers for them.
ANSWERED_BY = {meta.metrics_view: meta.metrics}
CATCH_ALLS = ("forq-unknown", "forq-v2-unknown")  # the JSON 404s of the rest of api/v1/ and api/v2/


def _template(route: str) -> str:
    """``api/v1/queues/<forq_segment:queue>/messages`` → ``/api/v1/queues/{}/messages``."""
    return "/" + re.sub(r"<[^>]+>", "{}", route)


def _routed() -> dict[str, set[str]]:
    routed = {}
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        if pattern.name in CATCH_ALLS:
            continue
        declared = plumbing.spec(ANSWERED_BY.get(pattern.callback, pattern.callback))
        assert declared is not None, f"{pattern.name} is not an endpoint"
        routed[_template(str(pattern.pattern))] = {m.lower() for m in declared.methods}
    return routed


def _documented() -> dict[str, set[str]]:
    return {
        re.sub(r"\{[^}]+\}", "{}", path): {m for m in item if m in HTTP_METHODS}
        for path, item in meta.openapi_document()["paths"].items()
    }


def test_the_error_schemas_name_every_code_their_api_answers():
    """Each API's error schema lists the codes it can answer (a 403 ``forbidden.key_scope`` was once
    left out): v1 all but the v2-only queue and schedule lookups, v2 all."""
    schemas = meta.openapi_document()["components"]["schemas"]
    v1, v2 = (set(schemas[name]["properties"]["code"]["enum"]) for name in ("Error", "V2Error"))
    assert set(errors.STATUS) - v1 == {errors.NOT_FOUND_QUEUE, errors.NOT_FOUND_SCHEDULE}
    assert set(errors.STATUS) - v2 == set()  # (a database that cannot serve: 503 forq.unhealthy, on v2 too)
    assert v1 <= set(errors.STATUS) and v2 <= set(errors.STATUS)


def test_every_route_is_documented_and_every_documented_path_is_routed():
    routed, documented = _routed(), _documented()
    assert sorted(set(routed) - set(documented)) == [], "routes missing from the openapi*.json documents"
    assert sorted(set(documented) - set(routed)) == [], "documented paths that no route serves"
    for path, methods in routed.items():
        assert methods == documented[path], path


def test_the_unknown_path_route_is_the_last_one():
    assert urls.urlpatterns[-1].name == "forq-unknown"


@pytest.mark.parametrize(("path", "name"), [
    ("/api/v1/queues/q/messages/batch", "forq-batch"),
    ("/api/v1/queues/q/messages/claim", "forq-claim"),
    ("/api/v1/queues/q/messages/ack", "forq-ack-many"),
    ("/api/v1/queues/q/messages/release", "forq-release-many"),
    ("/api/v1/queues/q/snapshot/bounds", "forq-snapshot-bounds"),
    ("/api/v1/staged/publish", "forq-publish-staged"),
    ("/api/v1/staged/discard", "forq-discard-staged"),
    ("/api/v1/queues/q/messages", "forq-messages"),
    ("/api/v1/queues/q/messages/batch/ack", "forq-ack"),  # "batch" as an id: the id route, a 400
    ("/api/v1/queues/q/staged/publish", "forq-stage"),
    ("/api/v1/queues/q/snapshot", "forq-snapshot"),
    ("/api/v1/queues/q/messages/x", "forq-unknown"),
    ("/api/v2/queues", "forq-v2-queues"),
    ("/api/v2/queues/q", "forq-v2-queue"),
    ("/api/v2/queues/q/messages", "forq-v2-send"),
    ("/api/v2/queues/q/messages/batch", "forq-v2-send-batch"),
    ("/api/v2/queues/q/messages/ack", "forq-v2-ack-batch"),
    ("/api/v2/queues/q/messages/nack", "forq-v2-nack-batch"),
    ("/api/v2/queues/q/messages/change-visibility", "forq-v2-change-visibility-batch"),
    ("/api/v2/queues/q/receive", "forq-v2-receive"),
    ("/api/v2/queues/q/peek", "forq-v2-peek"),
    ("/api/v2/queues/q/purge", "forq-v2-purge"),
    ("/api/v2/queues/q-dlq/requeue", "forq-v2-requeue"),
    ("/api/v2/queues/q-dlq/messages/requeue", "forq-v2-message"),  # "requeue" as an id: a 400
    ("/api/v2/queues/q/messages/batch/ack", "forq-v2-ack"),  # "batch" as an id: the id route, a 400
    ("/api/v2/queues/q/messages/m", "forq-v2-message"),
    ("/api/v2/queues/q/messages/m/change-visibility", "forq-v2-change-visibility"),
    ("/api/v2/queues/q/messages/m/defer", "forq-v2-defer"),
    ("/api/v2/queues/q/messages/defer", "forq-v2-message"),  # "defer" as an id: the message route, a 400
    ("/api/v2/queues/q/messages/m/x", "forq-v2-unknown"),
    ("/api/v2/schedules", "forq-v2-schedules"),
    ("/api/v2/schedules/nightly", "forq-v2-schedule"),
    ("/api/v2/schedules/run", "forq-v2-schedule"),  # a schedule may be named "run"
    ("/api/v2/schedules/nightly/run", "forq-v2-run-schedule"),
    ("/api/v2/schedules/nightly/x", "forq-v2-unknown"),
    ("/api/v2/queues/q/", "forq-v2-unknown"),
    ("/api/v2/openapi.json", "forq-v2-openapi"),
    ("/api/v1/queues/q/receive", "forq-unknown"),  # v2's words are not v1's
])
def test_literal_paths_are_never_swallowed_by_segment_routes(path, name):
    assert resolve(path, urlconf="forqapp.api.urls").url_name == name


# --- schemathesis against a real server -----------------------------------------------------------


@pytest.fixture(scope="module")
def served_schema(django_db_setup, django_db_blocker, tmp_path_factory):
    """A server of its own that never waits (long polls answer at once), and its served document.
    Its metrics live apart: the session's live_api keeps its counts."""
    api = start_server({"FORQ_LONG_POLL_SECONDS": "0",
                        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("prometheus"))})
    try:
        schema = schemathesis.openapi.from_url(api.url + "/api/v1/openapi.json")
        schema.config.update(base_url=api.url)
        yield schema
    finally:
        stop_server(api)


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _conforms(operation):
    """A hypothesis test of ``operation``: 40 generated requests, the same ones on every run."""

    @settings(max_examples=40, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def conforms(case):
        if isinstance(case.body, dict) and "wait" in case.body:
            case.body["wait"] = 0  # a bulk claim would wait up to 30 s for nothing
        key = METRICS_SECRET if operation.path == "/metrics" else SECRET
        response = case.call(headers={"X-API-Key": key}, timeout=10)
        case.validate_response(response, checks=CHECKS)

    return conforms


@pytest.mark.django_db(transaction=True)
def test_the_served_api_conforms_to_its_document(served_schema):
    """Every operation the document describes (~15 s in all)."""
    operations = [result.ok() for result in served_schema.get_all_operations()]
    served = {(op.method.lower(), re.sub(r"\{[^}]+\}", "{}", op.path)) for op in operations}
    documented = {(m, path) for path, methods in _documented().items() for m in methods}
    assert served == documented - {("get", "/api/v1/openapi.json")}  # schemathesis skips its source
    for operation in operations:
        _conforms(operation)()
