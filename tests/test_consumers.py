"""The consumer registry: the decorator, FORQ_CONSUMERS, autodiscovery, JSON decoding."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

import forqapp
from forqapp.services import ReceivedMessage
from forqapp.worker import consumers


def handler_from_settings(message):
    return ("settings", message.content)


@pytest.fixture
def clean_registry():
    saved, discovered = dict(consumers._registry), consumers._discovered
    consumers._registry.clear()
    consumers._discovered = False
    yield consumers._registry
    consumers._registry.clear()
    consumers._registry.update(saved)
    consumers._discovered = discovered


def message(content: str) -> ReceivedMessage:
    return ReceivedMessage(id="01000000-0000-7000-8000-000000000000", queue="q", content=content,
                           attempts=1, receipt=1)


def test_decorator_registers_and_returns_the_function(clean_registry):
    @forqapp.consumer("emails")
    def handle(m):
        return m.content.upper()

    assert handle(message("x")) == "X"
    entry = consumers.registry()["emails"]
    assert entry.handler is handle and entry.decode is None
    assert entry(message("hi")) == "HI"


def test_json_decode_passes_parsed_content_and_keeps_the_original(clean_registry):
    @forqapp.consumer("orders", decode="json")
    def handle(m):
        return m.content["n"], m.receipt

    original = message('{"n": 3}')
    assert consumers.registry()["orders"](original) == (3, 1)
    assert original.content == '{"n": 3}'


@pytest.mark.parametrize("content", ["not json", "[" * 100_000, "[" * 5000 + "]" * 5000])
def test_content_that_is_not_json_is_a_fatal_error(clean_registry, content):
    """Nested deeper than the parser goes counts as not JSON: retrying would fail the same way."""
    consumers.register("orders", lambda m: None, decode="json")
    with pytest.raises(forqapp.FatalError):
        consumers.registry()["orders"](message(content))


def test_settings_mapping(clean_registry, settings):
    settings.FORQ_CONSUMERS = {
        "a": "tests.test_consumers.handler_from_settings",
        "b": {"handler": "tests.test_consumers.handler_from_settings", "decode": "json"},
    }
    reg = consumers.registry()
    assert reg["a"](message("x")) == ("settings", "x")
    assert reg["b"].decode == "json"


def test_settings_mapping_errors(clean_registry, settings):
    settings.FORQ_CONSUMERS = {"a": "tests.nowhere.handler"}
    with pytest.raises(ImproperlyConfigured, match="cannot import"):
        consumers.registry()


def test_autodiscovers_consumers_modules(clean_registry, settings):
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.workerapp"]
    import sys

    sys.modules.pop("tests.workerapp.consumers", None)  # imported afresh, registering again
    assert {"work", "jsonq"} <= set(consumers.registry())


def test_two_consumers_for_one_queue_is_an_error(clean_registry):
    consumers.register("dup", lambda m: 1)
    with pytest.raises(ImproperlyConfigured, match="twice"):
        consumers.register("dup", lambda m: 2)


@pytest.mark.parametrize("kwargs", [{"queue": "bad name!"}, {"queue": "ok", "decode": "xml"}])
def test_invalid_registration(clean_registry, kwargs):
    with pytest.raises(ImproperlyConfigured):
        consumers.register(kwargs.pop("queue"), lambda m: None, **kwargs)


def test_settings_mapping_errors_name_every_bad_entry_in_one_line(clean_registry, settings):
    settings.FORQ_CONSUMERS = {"a": "tests.nowhere.handler", "b": "tests.test_consumers.nothing_here",
                               "c": "tests.test_consumers.handler_from_settings", "d": 42}
    entries, problems = consumers.settings_consumers()
    assert [q for q, _, _ in entries] == ["c"]
    assert [p.split(":")[0] for p in problems] == ["FORQ_CONSUMERS['a']", "FORQ_CONSUMERS['b']",
                                                  "FORQ_CONSUMERS['d'] must be a dotted path (got 42)"]
    with pytest.raises(ImproperlyConfigured) as info:
        consumers.registry()
    assert str(info.value) == "; ".join(problems) and "\n" not in str(info.value)
