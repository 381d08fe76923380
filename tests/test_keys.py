"""Scoped API keys (issue 16) in the API: every endpoint × its action, allowed and denied, on both
APIs (the in-process ASGI app of ``forq_serve``, and Django's own handler); 401 vs 403 and the
throttle; the cache (no query per request, revocation and expiry); last use; the secret at rest;
the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import resolve

import forqapp
from forqapp import errors
from forqapp.api import plumbing
from forqapp.api.asgi import APIApplication
from forqapp.keys import ACTIONS, MANAGE, PRODUCE, cache, crypto, service
from forqapp.keys.cache import for_access_key, for_token
from forqapp.keys.models import ApiKey, KeyEvent
from forqapp.models import Message

from .test_hostile import APP_SECRET, _call, _pieces, _scope

pytestmark = pytest.mark.django_db(transaction=True)

MID = "0190a0b2-0000-7000-8000-000000000001"


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.forget()
    yield
    cache.forget()


@pytest.fixture(scope="module")
def app():
    return APIApplication()


def new_key(name: str, *grant_texts: str, **kw) -> service.Issued:
    return service.create(name, list(grant_texts), actor="test", via="cli", **kw)


def request(app, method: str, path: str, key: str, body: bytes = b"", client: str = "127.0.0.1", **headers):
    hdrs = {"x-api-key": key.encode(), "content-type": b"application/json", **{k.replace("_", "-"): v.encode() for k, v in headers.items()}}
    scope = _scope(method, path, hdrs, client=client)
    with override_settings(FORQ_LONG_POLL_SECONDS=0):
        status, _, raw = asyncio.run(_call(app, scope, _pieces((0, body))))
    return status, (json.loads(raw) if raw and raw.startswith(b"{") else None)


# --- the matrix: every endpoint, method and action --------------------------------------------------------

Q = "orders"
ROUTES = [  # (method, path, body) on queue Q, or on no queue for "all"-scoped ones
    ("POST", "/api/v1/queues/{q}/messages", {"content": "x"}),
    ("GET", "/api/v1/queues/{q}/messages", None),
    ("POST", f"/api/v1/queues/{{q}}/messages/{MID}/ack", None),
    ("POST", f"/api/v1/queues/{{q}}/messages/{MID}/nack", None),
    ("POST", "/api/v1/queues/{q}/messages/batch", {"messages": [{"content": "x"}]}),
    ("POST", "/api/v1/queues/{q}/staged/tok-1", {"messages": [{"content": "x"}]}),
    ("POST", "/api/v1/queues/{q}/messages/claim", {"max": 1}),
    ("POST", "/api/v1/queues/{q}/messages/ack", {"deliveries": []}),
    ("POST", "/api/v1/queues/{q}/messages/release", {"deliveries": []}),
    ("GET", "/api/v1/queues/{q}/snapshot", None),
    ("GET", "/api/v1/queues/{q}/snapshot/bounds", None),
    ("POST", "/api/v1/staged/publish", {"staged": [{"token": "tok-1", "queue": "{q}"}]}),
    ("POST", "/api/v1/staged/discard", {"staged": [{"token": "tok-1", "queue": "{q}"}]}),
    ("GET", "/api/v2/queues/{q}", None),
    ("PATCH", "/api/v2/queues/{q}", {"max_attempts": 3}),
    ("PUT", "/api/v2/queues/{q}", {}),
    ("DELETE", "/api/v2/queues/{q}", None),
    ("POST", "/api/v2/queues/{q}/purge", None),
    ("POST", "/api/v2/queues/{q}-dlq/purge", None),  # a DLQ's: manage on the DLQ
    ("POST", "/api/v2/queues/{q}-dlq/requeue", {}),
    ("DELETE", f"/api/v2/queues/{{q}}-dlq/messages/{MID}", None),
    ("POST", "/api/v2/queues/{q}/messages", {"content": "x"}),
    ("POST", "/api/v2/queues/{q}/messages/batch", {"entries": [{"content": "x"}]}),
    ("POST", "/api/v2/queues/{q}/receive", {}),
    ("GET", "/api/v2/queues/{q}/peek", None),
    ("GET", f"/api/v2/queues/{{q}}/messages/{MID}", None),
    ("POST", f"/api/v2/queues/{{q}}/messages/{MID}/ack", {"receipt": "1"}),
    ("POST", f"/api/v2/queues/{{q}}/messages/{MID}/nack", {"receipt": "1"}),
    ("POST", f"/api/v2/queues/{{q}}/messages/{MID}/change-visibility", {"receipt": "1", "visibility_timeout": 1}),
    ("POST", f"/api/v2/queues/{{q}}/messages/{MID}/defer", {"receipt": "1"}),
    ("POST", "/api/v2/queues/{q}/messages/ack", {"entries": [{"id": MID, "receipt": "1"}]}),
    ("POST", "/api/v2/queues/{q}/messages/nack", {"entries": [{"id": MID, "receipt": "1"}]}),
    ("POST", "/api/v2/queues/{q}/messages/change-visibility",
     {"entries": [{"id": MID, "receipt": "1"}], "visibility_timeout": 1}),
    ("GET", "/api/v2/schedules", None),
    ("PUT", "/api/v2/schedules/nightly", {"queue": "{q}", "content": "x", "every": 60}),
    ("GET", "/api/v2/schedules/nightly", None),
    ("POST", "/api/v2/schedules/nightly/run", None),
    ("DELETE", "/api/v2/schedules/nightly", None),
]


def _declared(method: str, path: str) -> tuple[str, str]:
    spec = plumbing.spec(resolve(path.format(q=Q), urlconf="forqapp.api.urls").func)
    return spec.action(method), spec.scope


def test_the_matrix_covers_every_keyed_route_and_method():
    """Every route that takes the API key is in ROUTES with each of its methods (so none is missed)."""
    from forqapp.api import urls

    covered = {(m, resolve(p.format(q=Q), urlconf="forqapp.api.urls").route) for m, p, _ in ROUTES}
    for pattern in urls.urlpatterns:
        spec = plumbing.spec(pattern.callback)
        if spec is None or spec.key != "FORQ_AUTH_SECRET":
            continue
        if str(pattern.pattern) == "api/v2/queues":
            continue  # filtered by the key's read grants: test_queue_list_shows_what_the_key_may_read
        for method in spec.methods:
            assert (method, str(pattern.pattern)) in covered, (method, pattern.pattern)
            assert spec.action(method) in ACTIONS


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_each_endpoint_allows_its_action_and_denies_the_others(app, method, path, body):
    action, scope = _declared(method, path)
    target = "*" if scope == "all" else Q
    others = [a for a in ACTIONS if a != action]
    if "{q}-dlq" in path:  # a DLQ's endpoint: only a grant that names the DLQ covers it
        allowed = new_key("allowed", f"{Q}-dlq:{action}")
        # Every other action on the DLQ; the action on the queue, on every queue and on the other
        # queues' DLQs, with no grant that covers this DLQ.
        denied = new_key("denied", f"{Q}+dlq:{','.join(others)}", f"{Q}:{action}", f"{Q}-*:{action}",
                         f"*:{action}", f"{Q}2+dlq:{action}", f"{Q}.*+dlq:{action}")
    else:
        allowed = new_key("allowed", f"{target}:{action}")  # (a queue's DELETE leaves its DLQ: no +dlq)
        # Every other action on the queue and the DLQ, and the action itself on other queues only.
        denied = new_key("denied", f"{target}+dlq:{','.join(others)}", f"{Q}.*:{action}", f"{Q}-dlq:{action}",
                         f"{Q}2:{action}")
    raw = b"" if body is None else json.dumps(body).replace("{q}", Q).encode()
    url = path.format(q=Q)

    status, answer = request(app, method, url, denied.token, raw)
    assert status == 403, (status, answer)
    assert answer["code"] == errors.FORBIDDEN == "forbidden.key_scope"
    if url.startswith("/api/v2/"):
        assert answer["message"]

    status, answer = request(app, method, url, allowed.token, raw)
    assert status not in (401, 403), (status, answer)
    status, answer = request(app, method, url, APP_SECRET, raw)  # the root key: every scope
    assert status not in (401, 403), (status, answer)


def test_under_django_the_same_scopes_hold(client):
    producer = new_key("producer", "orders:produce")
    ok = client.post("/api/v1/queues/orders/messages", {"content": "x"}, content_type="application/json",
                     HTTP_X_API_KEY=producer.token)
    assert ok.status_code == 204
    denied = client.get("/api/v1/queues/orders/messages", HTTP_X_API_KEY=producer.token)
    assert denied.status_code == 403 and denied.json() == {"code": errors.FORBIDDEN}
    v2 = client.post("/api/v2/queues/orders/receive", {}, content_type="application/json",
                     HTTP_X_API_KEY=producer.token)
    assert v2.status_code == 403 and v2.json()["code"] == errors.FORBIDDEN and v2.json()["message"]
    assert client.post("/api/v2/queues/orders/messages", {"content": "y"}, content_type="application/json",
                       HTTP_X_API_KEY=producer.token).status_code == 201


def test_least_privilege_producer_and_worker(app):
    """The example of docs/how-to/keys.md: a producer that can only send to orders, a worker that can only consume it."""
    producer = new_key("orders-producer", "orders:produce")
    worker = new_key("orders-worker", "orders:consume")
    assert request(app, "POST", "/api/v1/queues/orders/messages", producer.token, b'{"content": "o-1"}')[0] == 204
    assert request(app, "POST", "/api/v1/queues/payments/messages", producer.token, b'{"content": "x"}')[0] == 403
    assert request(app, "GET", "/api/v1/queues/orders/messages", producer.token)[0] == 403
    assert request(app, "POST", "/api/v1/queues/orders/messages", worker.token, b'{"content": "x"}')[0] == 403
    status, message = request(app, "GET", "/api/v1/queues/orders/messages", worker.token)
    assert status == 200 and message["content"] == "o-1"
    ack = f"/api/v1/queues/orders/messages/{message['id']}/ack"
    assert request(app, "POST", ack, worker.token, x_forq_receipt=message["receipt"])[0] == 204
    assert request(app, "GET", "/api/v2/queues/orders/peek", worker.token)[0] == 403  # no read grant


def test_queue_list_shows_what_the_key_may_read(app):
    for q in ("orders", "orders.eu", "payments"):
        assert request(app, "POST", f"/api/v1/queues/{q}/messages", APP_SECRET, b'{"content": "x"}')[0] == 204
    reader = new_key("reader", "orders.*:read")
    status, answer = request(app, "GET", "/api/v2/queues", reader.token)
    assert status == 200 and [q["name"] for q in answer["queues"]] == ["orders.eu"]
    status, answer = request(app, "GET", "/api/v2/queues", APP_SECRET)
    assert {"orders", "orders.eu", "payments"} <= {q["name"] for q in answer["queues"]}


def test_deleting_a_queue_needs_manage_on_it_alone_and_leaves_its_dlq(app):
    """A queue's DELETE deletes its messages, never its DLQ's (a queue of its own): ``gone:manage``
    is enough, and the DLQ's messages stay for a key that may manage the DLQ."""
    assert request(app, "POST", "/api/v1/queues/gone/messages", APP_SECRET, b'{"content": "x"}')[0] == 204
    dead = forqapp.send("gone", "dead")
    Message.objects.filter(id=dead).update(queue="gone-dlq", is_dlq=True)
    narrow = new_key("narrow-manager", "gone:manage")
    assert request(app, "DELETE", "/api/v2/queues/gone", narrow.token)[0] == 204
    assert list(Message.objects.filter(queue__in=["gone", "gone-dlq"]).values_list("id", flat=True)) == [dead]
    assert request(app, "POST", "/api/v2/queues/gone-dlq/purge", narrow.token)[0] == 403


def test_publish_of_staged_writes_needs_produce_on_every_queue(app):
    key = new_key("stager", "a:produce")
    body = json.dumps({"staged": [{"token": "t-1", "queue": "a"}, {"token": "t-1", "queue": "b"}]}).encode()
    assert request(app, "POST", "/api/v1/staged/publish", key.token, body)[0] == 403
    body = json.dumps({"staged": [{"token": "t-1", "queue": "a"}]}).encode()
    assert request(app, "POST", "/api/v1/staged/publish", key.token, body)[0] == 200


# --- 401 vs 403, and the throttle -------------------------------------------------------------------------


@override_settings(FORQ_AUTH_MAX_FAILURES=3)
def test_only_wrong_keys_count_toward_the_throttle(app):
    key = new_key("narrow", "orders:read")
    for _ in range(10):  # 403s: a right key without the grant is no guess
        status, answer = request(app, "GET", "/api/v1/queues/orders/messages", key.token, client="10.9.9.1")
        assert status == 403
    assert request(app, "GET", "/api/v2/queues/orders/peek", key.token, client="10.9.9.1")[0] == 200
    wrong_secret = key.key.access_key_id + "." + "x" * 40
    unknown_id = "FQK" + "A" * 17 + "." + key.secret
    for bad in (wrong_secret, unknown_id, "garbage", key.secret):
        status, answer = request(app, "GET", "/api/v2/queues/orders", bad, client="10.9.9.2")
        assert status in (401, 429)
    status, _ = request(app, "GET", "/api/v2/queues/orders", "wrong", client="10.9.9.2")
    assert status == 429


def test_revoked_disabled_expired_and_rotated_keys_are_refused(app, clock):
    a, b, c, d = (new_key(n, "*:read") for n in "abcd")
    e = new_key("e", "*:read", expires_at=clock.now + 60_000)
    for k in (a, b, c, d, e):
        assert request(app, "GET", "/api/v2/queues", k.token)[0] == 200
    service.revoke(a.key, actor="t", via="cli")
    service.set_enabled(b.key, False, actor="t", via="cli")
    rotated = service.rotate(c.key, actor="t", via="cli")
    ApiKey.objects.filter(pk=d.key.pk).update(expires_at=1)  # expired long ago (another process did it)
    cache.forget(d.key.access_key_id)
    for k in (a, b, c, d):
        assert request(app, "GET", "/api/v2/queues", k.token)[0] == 401, k.key.name
    assert request(app, "GET", "/api/v2/queues", rotated.token)[0] == 200
    assert rotated.key.access_key_id == c.key.access_key_id
    # An expiry takes effect at once, even while the key is cached.
    import time

    ApiKey.objects.filter(pk=e.key.pk).update(expires_at=int(time.time() * 1000) + 300)
    cache.forget(e.key.access_key_id)
    assert request(app, "GET", "/api/v2/queues", e.token)[0] == 200
    time.sleep(0.4)
    assert request(app, "GET", "/api/v2/queues", e.token)[0] == 401
    actions = list(KeyEvent.objects.order_by("at", "id").values_list("key__name", "action"))
    assert ("a", "revoked") in actions and ("b", "disabled") in actions and ("c", "rotated") in actions
    assert actions.count(("a", "created")) == 1


def test_a_change_elsewhere_takes_effect_within_the_cache_period(settings):
    """Another process revokes the key (a database write this process's cache does not see)."""
    import time

    settings.FORQ_KEYS_CACHE_SECONDS = 0.3
    k = new_key("cached", "*:read")
    assert for_token(k.token) is not None
    ApiKey.objects.filter(pk=k.key.pk).update(revoked_at=1)  # not through this process's service
    assert for_token(k.token) is not None  # still cached
    time.sleep(0.35)
    assert for_token(k.token) is None


# --- the contract ---------------------------------------------------------------------------------------


def test_contract_for_access_key_and_for_token(settings, monkeypatch):
    k = new_key("contract", "orders:produce")
    key = for_access_key(k.key.access_key_id)
    assert key is not None and key.secret == k.secret and key.allows("orders", PRODUCE)
    assert not key.allows("orders", MANAGE)
    assert for_token(k.token) == key
    wrong = "y" if k.secret.endswith("x") else "x"  # (one secret in 64 ends in "x": it was then right)
    assert for_token(k.key.access_key_id + "." + k.secret[:-1] + wrong) is None
    assert for_token(None) is None and for_token("") is None
    assert for_access_key("FQK" + "B" * 17) is None
    root = for_access_key("forq-root")
    assert root is not None and root.root and root.secret == settings.FORQ_AUTH_SECRET
    assert for_token(settings.FORQ_AUTH_SECRET) == root
    settings.FORQ_AUTH_SECRET = ""
    monkeypatch.delenv("FORQ_AUTH_SECRET", raising=False)  # an empty setting falls back to the environment
    assert for_access_key("forq-root") is None and for_token("") is None


def test_a_key_refused_where_there_is_no_root_key_says_why(app, settings, monkeypatch, caplog):
    """A server started in a shell that never exported FORQ_AUTH_SECRET refuses every root key
    (401, as any wrong key): its log says why, once a minute, not just "Unauthorized"."""
    from forqapp.api import plumbing

    settings.FORQ_AUTH_SECRET = ""
    monkeypatch.delenv("FORQ_AUTH_SECRET", raising=False)
    monkeypatch.setattr(plumbing, "_said_no_root_key", -1e9)
    with caplog.at_level("WARNING", logger="forqapp.api"):
        assert request(app, "POST", "/api/v1/queues/orders/messages", "the-servers-key", b'{"content": "x"}',
                       client="10.1.1.1")[0] == 401
        assert request(app, "POST", "/api/v1/queues/orders/messages", "the-servers-key", b'{"content": "x"}',
                       client="10.1.1.2")[0] == 401
    said = [r.getMessage() for r in caplog.records if "no FORQ_AUTH_SECRET" in r.getMessage()]
    assert len(said) == 1, said
    k = new_key("scoped-without-root", "orders:produce")  # scoped keys still work there
    assert request(app, "POST", "/api/v1/queues/orders/messages", k.token, b'{"content": "x"}')[0] == 204


def test_a_key_rotated_elsewhere_works_here_within_the_recheck_not_the_cache_period(settings, monkeypatch):
    """Another process rotates the key (its forget() does not reach this process's cache): the new
    secret is refused only until the cached answer is RECHECK_SECONDS old, then the database is asked."""
    import time

    from forqapp.keys import crypto, tokens

    settings.FORQ_KEYS_CACHE_SECONDS = 60
    k = new_key("rotated-elsewhere", "orders:read")
    assert for_token(k.token) is not None  # cached for a minute
    secret = tokens.new_secret()
    ApiKey.objects.filter(pk=k.key.pk).update(secret_sealed=crypto.seal(secret, k.key.access_key_id))
    new_token = k.key.access_key_id + "." + secret
    monkeypatch.setattr(cache, "RECHECK_SECONDS", 3600)
    assert for_token(new_token) is None  # the cached answer is fresh: refused without a query
    monkeypatch.setattr(cache, "RECHECK_SECONDS", 0.05)
    time.sleep(0.06)
    assert cache.for_token_cached(new_token) is cache.MISS  # the fast path hands it to the general one
    assert for_token(new_token) is not None  # asked again: the new secret works
    assert for_token(k.token) is None  # and the old one is refused here at once


def test_a_key_created_after_its_id_was_refused_works_within_the_recheck(settings, monkeypatch):
    import time

    settings.FORQ_KEYS_CACHE_SECONDS = 60
    monkeypatch.setattr(cache, "RECHECK_SECONDS", 0.05)
    k = new_key("late", "orders:read")
    ApiKey.objects.filter(pk=k.key.pk).update(enabled=False)
    cache.forget()
    assert for_token(k.token) is None  # remembered as unusable for a minute
    ApiKey.objects.filter(pk=k.key.pk).update(enabled=True)  # enabled by another process
    time.sleep(0.06)
    assert for_token(k.token) is not None


def test_a_cached_key_costs_no_query(django_assert_num_queries, monkeypatch):
    monkeypatch.setattr(cache, "RECHECK_SECONDS", 3600)  # a refusal is not rechecked within this test
    k = new_key("hot", "orders:read")
    for_token(k.token)  # fills the cache
    with django_assert_num_queries(0):
        for _ in range(100):
            assert for_token(k.token) is not None
            assert for_token(k.key.access_key_id + "." + "y" * 40) is None


def test_last_use_is_written_once_per_refresh_not_per_request(settings, django_assert_num_queries):
    settings.FORQ_KEYS_CACHE_SECONDS = 60
    k = new_key("used", "orders:read")
    wrong = k.key.access_key_id + "." + "z" * 40
    assert for_token(wrong) is None  # a wrong secret is no use
    assert ApiKey.objects.get(pk=k.key.pk).last_used_at is None
    cache.forget()
    with django_assert_num_queries(2):  # the load and one write of last use, for 50 requests
        for _ in range(50):
            assert for_token(k.token) is not None
    first = ApiKey.objects.get(pk=k.key.pk).last_used_at
    assert first is not None
    import time

    time.sleep(0.01)
    for_token(k.token)  # from the cache: noted in memory only
    assert ApiKey.objects.get(pk=k.key.pk).last_used_at == first
    assert cache.flush_last_used() == 1
    assert ApiKey.objects.get(pk=k.key.pk).last_used_at > first


# --- at rest ---------------------------------------------------------------------------------------------


def test_the_secret_is_not_in_the_database(settings):
    k = new_key("at-rest", "orders:produce")
    row = ApiKey.objects.get(pk=k.key.pk)
    assert k.secret not in json.dumps([row.secret_sealed, row.grants, row.name, row.access_key_id])
    if connection.vendor == "sqlite":  # the whole file, as a copy of the database gives it
        # Copied through this connection (SQLite's backup API): opening and closing another handle on
        # the live file in this process drops its POSIX locks, and SQLite may then unlink the WAL
        # under the open connections (a server started later would not see their writes).
        connection.ensure_connection()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "copy.sqlite3")
            copy = sqlite3.connect(path)
            try:
                connection.connection.backup(copy)
                dump = "\n".join(copy.iterdump())
            finally:
                copy.close()
            with open(path, "rb") as f:
                data = f.read()
        assert k.key.access_key_id.encode() in data and k.secret.encode() not in data
        assert k.key.access_key_id in dump and k.secret not in dump
    elif connection.vendor == "postgresql" and shutil.which("pg_dump"):
        db = connection.settings_dict
        dump = subprocess.run(["pg_dump", "-h", db.get("HOST") or "127.0.0.1", "-p", str(db.get("PORT") or 5432),
                               "-U", db.get("USER") or "postgres", "-t", "forq_api_keys", db["NAME"]],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PGPASSWORD": db.get("PASSWORD") or ""}).stdout
        assert k.key.access_key_id in dump and k.secret not in dump
    # Without the server key it does not open; with it, it does.
    assert crypto.unseal(row.secret_sealed, row.access_key_id) == k.secret
    settings.FORQ_KEYS_SECRET = "another-server-key-0123456789abcdef"
    with pytest.raises(crypto.SealError):
        crypto.unseal(row.secret_sealed, row.access_key_id)
    assert for_token(k.token) is None  # fails closed (and logs why)
    # A sealed secret moved to another key's row does not open either (bound to its id).
    settings.FORQ_KEYS_SECRET = ""
    with pytest.raises(crypto.SealError):
        crypto.unseal(row.secret_sealed, "FQK" + "C" * 17)


# --- the CLI ----------------------------------------------------------------------------------------------


def run(*args) -> list[str]:
    from io import StringIO

    out = StringIO()
    call_command("forq_keys", *args, stdout=out)
    return out.getvalue().splitlines()


def test_cli_create_list_rotate_revoke(app):
    lines = run("create", "orders-producer", "--grant", "orders:produce", "--grant", "orders.*:read", "--expires", "30d")
    token = lines[-1]
    access_key_id = next(line.split()[-1] for line in lines if line.startswith("access key id"))
    secret = next(line.split()[-1] for line in lines if line.startswith("secret"))
    assert token == f"{access_key_id}.{secret}"
    assert request(app, "POST", "/api/v1/queues/orders/messages", token, b'{"content": "x"}')[0] == 204
    listing = run("list")
    assert any("orders-producer" in line and "active" in line and "orders:produce" in line for line in listing)
    assert secret not in "\n".join(listing)
    assert json.loads("\n".join(run("list", "--json")))[0]["grants"] == ["orders:produce", "orders.*:read"]
    assert run("--json", "list") == run("list", "--json")  # before the subcommand too, as forq_queues
    new_token = run("rotate", "orders-producer")[-1]
    assert new_token != token and new_token.startswith(access_key_id + ".")
    assert request(app, "POST", "/api/v1/queues/orders/messages", token, b'{"content": "x"}')[0] == 401
    assert request(app, "POST", "/api/v1/queues/orders/messages", new_token, b'{"content": "x"}')[0] == 204
    assert run("revoke", access_key_id)[0].startswith("revoked orders-producer")
    assert request(app, "POST", "/api/v1/queues/orders/messages", new_token, b'{"content": "x"}')[0] == 401
    assert [e.action for e in KeyEvent.objects.order_by("at", "id")] == ["created", "rotated", "revoked"]
    assert KeyEvent.objects.first().actor.startswith("cli")


@pytest.mark.parametrize("args", [
    ("create", "bad", "--grant", "orders*:produce"),
    ("create", "bad", "--grant", "orders:write"),
    ("create", "bad", "--grant", "orders:read", "--expires", "2001-01-01"),
    ("revoke", "nobody"),
    ("rotate", "nobody"),
])
def test_cli_refusals(args):
    from django.core.management import CommandError

    with pytest.raises((CommandError, SystemExit)):
        run(*args)
    assert not ApiKey.objects.exists()


def test_cli_refuses_a_taken_name():
    from django.core.management import CommandError

    run("create", "twice", "--grant", "a:read")
    with pytest.raises(CommandError, match="exists already"):
        run("create", "twice", "--grant", "a:read")


def test_cli_refuses_to_create_without_the_servers_sealing_key(settings, monkeypatch):
    """A new user ran ``manage.py forq_keys create`` in a fresh shell (without var/local.env): the key
    was sealed with a key the server does not use, and its token could never work (401)."""
    from django.core.management import CommandError

    settings.FORQ_KEYS_SECRET = ""
    settings.FORQ_AUTH_SECRET = ""
    monkeypatch.delenv("FORQ_KEYS_SECRET", raising=False)
    monkeypatch.delenv("FORQ_AUTH_SECRET", raising=False)
    with pytest.raises(CommandError) as caught:
        run("create", "orders-producer", "--grant", "orders:produce")
    assert "FORQ_KEYS_SECRET is not set" in str(caught.value) and "var/local.env" in str(caught.value)
    assert not ApiKey.objects.exists()


def test_cli_refuses_a_sealing_key_that_does_not_open_the_stored_keys(settings):
    from django.core.management import CommandError

    settings.FORQ_KEYS_SECRET = "the-servers-sealing-key-0123456789abcdef"
    run("create", "made-by-the-server", "--grant", "a:read")
    settings.FORQ_KEYS_SECRET = "another-sealing-key-0123456789abcdefgh"
    for args in (("create", "second", "--grant", "a:read"), ("rotate", "made-by-the-server")):
        with pytest.raises(CommandError, match="FORQ_KEYS_SECRET differs from the server's"):
            run(*args)
    settings.FORQ_KEYS_SECRET = ""  # SECRET_KEY's: not the server's either
    with pytest.raises(CommandError, match="FORQ_KEYS_SECRET is not set here, and SECRET_KEY is not"):
        run("create", "second", "--grant", "a:read")
    assert list(ApiKey.objects.values_list("name", flat=True)) == ["made-by-the-server"]
    settings.FORQ_KEYS_SECRET = "the-servers-sealing-key-0123456789abcdef"
    assert run("create", "second", "--grant", "a:read")[-1].startswith("FQK")


def test_cli_seals_with_secret_key_when_a_project_does_so_throughout(settings):
    settings.FORQ_KEYS_SECRET = ""  # documented: empty means derived from SECRET_KEY (the server's too)
    run("create", "first", "--grant", "a:read")
    run("create", "second", "--grant", "a:read")
    assert ApiKey.objects.count() == 2
