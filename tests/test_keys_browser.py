# ruff: noqa: S106, F811  (test passwords; the fixtures imported from test_ui_browser)
"""Scoped API keys in Debian's Chromium (issue 16), on the real UI listener (``forq_serve``'s UI
process, the project's settings and middleware, CSRF as a browser does it): the HTMX page creates a
key (the token shown once works on the API for its grant only), rotates and revokes it behind the
confirmation dialog; the Django admin adds a key and revokes it through its confirmation page."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from forqapp.keys.models import ApiKey, KeyEvent
from tests.test_ui_browser import CHROMIUM, browser_page, shot, staff_user  # noqa: F401  (fixtures)

from .conftest import free_port, start_server, stop_server
from .test_admin_browser import admin_login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium not installed at {CHROMIUM}"),
]

CACHE_S = 0.5


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker):
    """forq_serve with its UI listener; its API caches keys for CACHE_S. Yields (ui url, api url)."""
    ui_port = free_port()
    server = start_server({"FORQ_UI_ADDR": f"127.0.0.1:{ui_port}", "FORQ_KEYS_CACHE_SECONDS": str(CACHE_S)}, args=())
    url = f"http://127.0.0.1:{ui_port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/admin/login/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the UI listener did not answer within 30 s") from None
                time.sleep(0.1)
        yield url, server.url
    finally:
        stop_server(server)


def api(api_url: str, token: str, method: str = "POST", queue: str = "orders") -> int:
    if method == "POST":
        return httpx.post(f"{api_url}/api/v1/queues/{queue}/messages", json={"content": "x"},
                          headers={"X-API-Key": token}, timeout=10).status_code
    return httpx.get(f"{api_url}/api/v2/queues/{queue}/peek", headers={"X-API-Key": token}, timeout=10).status_code


def eventually(fn, expected, seconds: float = CACHE_S + 3):
    deadline = time.monotonic() + seconds
    while (got := fn()) != expected:
        assert time.monotonic() < deadline, f"{got} != {expected}"
        time.sleep(0.1)


def _log_in_to_the_keys_page(page, ui: str) -> None:
    page.goto(ui + "/keys/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-admin-123")
    page.click("button[type=submit]")
    page.wait_for_selector("[data-testid=no-keys]")


def test_keys_page_create_rotate_revoke_in_a_browser(live, browser_page, staff_user):
    ui, api_url = live
    page = browser_page
    _log_in_to_the_keys_page(page, ui)
    page.fill("[data-testid=key-name]", "orders-producer")
    page.fill("[data-testid=key-grants]", "orders:produce")
    page.click("[data-testid=create-key]")
    page.wait_for_selector("[data-testid=issued-key]")
    token = page.inner_text("[data-testid=token]")
    shot(page, "keys-created")
    # The whole table, Actions included, fits its card at a laptop's width (an audit found Rotate and
    # Revoke clipped off to the right, even at 1920 px).
    widths = page.evaluate("() => { const t = document.querySelector('table.keys'); return [t.scrollWidth, t.parentElement.clientWidth]; }")
    assert widths[0] <= widths[1], widths
    assert api(api_url, token) == 204  # its grant
    assert api(api_url, token, "GET") == 403  # not its grant
    assert api(api_url, token, queue="payments") == 403

    # Rotate behind the dialog: cancel first, then confirm.
    page.click("[data-testid=rotate]")
    page.wait_for_selector("#confirm-dialog[open]")
    page.click("#confirm-dialog button[value=cancel]")
    assert ApiKey.objects.get().rotated_at is None
    page.click("[data-testid=rotate]")
    assert page.get_attribute("#confirm-dialog button[value=ok]", "class") == "btn primary"
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_function("t => document.querySelector('[data-testid=token]').innerText !== t", arg=token)
    new_token = page.inner_text("[data-testid=token]")
    eventually(lambda: api(api_url, token), 401)
    # Each API worker has its own cache: one that read the key in the last RECHECK_SECONDS refuses the
    # new secret until then (tests/test_keys.py pins the rule), never for a cache period.
    eventually(lambda: api(api_url, new_token), 204, seconds=1)

    page.click("[data-testid=revoke]")
    assert page.get_attribute("#confirm-dialog button[value=ok]", "class") == "btn danger"  # as Revoke is
    page.click("#confirm-dialog button[value=ok]")
    page.wait_for_selector("[data-testid=keys-flash]:has-text('Revoked orders-producer')")
    assert page.inner_text("[data-testid=key-state]") == "revoked"
    eventually(lambda: api(api_url, new_token), 401)
    shot(page, "keys-revoked")
    assert list(KeyEvent.objects.order_by("at", "id").values_list("action", "actor", "via")) == [
        ("created", "admin", "ui"), ("rotated", "admin", "ui"), ("revoked", "admin", "ui")]


def test_admin_add_and_revoke_a_key_in_a_browser(live, browser_page, staff_user):
    ui, api_url = live
    page = browser_page
    page.goto(ui + "/admin/forqapp/apikey/add/")
    admin_login(page)
    page.fill("#id_name", "worker")
    page.fill("#id_grants_text", "orders:consume\norders:read")
    page.fill("#id_expires", "soon")  # refused on its field, nothing made
    with page.expect_navigation() as navigation:
        page.click("input[name=_save]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]  # a 403 CSRF would show here
    assert "neither a duration" in page.inner_text(".form-row.field-expires .errorlist")
    assert not ApiKey.objects.exists()
    page.fill("#id_expires", "30d")  # a duration, as the keys page and forq_keys take it
    with page.expect_navigation() as navigation:
        page.click("input[name=_save]")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    token = page.inner_text("[data-testid=token]")
    assert abs(ApiKey.objects.get(name="worker").expires_at - (time.time() * 1000 + 30 * 86_400_000)) < 120_000
    shot(page, "admin-key-created")
    assert api(api_url, token, "GET") == 200 and api(api_url, token) == 403
    page.goto(ui + "/admin/forqapp/apikey/")
    page.check(f"input.action-select[value='{ApiKey.objects.get(name='worker').pk}']")
    page.select_option("select[name=action]", "revoke_keys")
    with page.expect_navigation():
        page.click("button[name=index]")
    page.wait_for_selector("body.delete-confirmation")
    with page.expect_navigation() as navigation:
        page.click("input[type=submit][value^='Revoke']")
    assert navigation.value.status == 200, page.inner_text("body")[:300]
    page.wait_for_selector("ul.messagelist")
    assert "Revoked 1 key" in page.inner_text("ul.messagelist")
    eventually(lambda: api(api_url, token, "GET"), 401)
    # Disabling it now: the revoked key is named and left as it is (it used to say "Disabled 1 key").
    worker = ApiKey.objects.get(name="worker")
    page.check(f"input.action-select[value='{worker.pk}']")
    page.select_option("select[name=action]", "disable_keys")
    with page.expect_navigation():
        page.click("button[name=index]")
    with page.expect_navigation():
        page.click("input[type=submit][value^='Disable']")
    shown = page.inner_text("ul.messagelist")
    assert "'worker' is revoked: it cannot be disabled" in shown and "Disabled 0 keys" in shown, shown
    assert ApiKey.objects.get(pk=worker.pk).enabled
    # Its audit log gives the expiry as a date, in UTC.
    page.goto(ui + f"/admin/forqapp/apikey/{worker.pk}/change/")
    expires = time.strftime("%Y-%m-%d", time.gmtime(worker.expires_at / 1000))
    assert f"expires {expires} " in page.inner_text("body") and str(worker.expires_at) not in page.inner_text("body")


def test_keys_page_without_javascript_asks_on_a_confirmation_page(live, browser_page, staff_user):
    """JavaScript off: the forms post as plain forms (no hx-confirm dialog), so the server answers a
    confirmation page; Cancel changes nothing, Confirm revokes."""
    ui, api_url = live
    context = browser_page.context.browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 860})
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        _log_in_to_the_keys_page(page, ui)
        page.fill("[data-testid=key-name]", "no-script")
        page.fill("[data-testid=key-grants]", "orders:produce")
        page.click("[data-testid=create-key]")  # a plain form post: the whole page, the token shown once
        token = page.inner_text("[data-testid=token]")
        assert api(api_url, token) == 204

        page.click("[data-testid=revoke]")
        page.wait_for_selector("[data-testid=confirm-page]")
        assert page.inner_text("[data-testid=confirm-question]") == (
            "Revoke no-script for good? Its clients are refused within seconds.")
        shot(page, "keys-confirm-no-js")
        page.click("[data-testid=confirm-cancel]")
        page.wait_for_selector("[data-testid=key-state]:has-text('active')")
        assert ApiKey.objects.get().revoked_at is None and api(api_url, token) == 204

        page.click("[data-testid=revoke]")
        page.click("[data-testid=confirm-submit]")
        page.wait_for_selector("[data-testid=keys-flash]:has-text('Revoked no-script')")
        assert page.inner_text("[data-testid=key-state]") == "revoked"
        eventually(lambda: api(api_url, token), 401)
        assert list(KeyEvent.objects.order_by("at", "id").values_list("action", "via")) == [
            ("created", "ui"), ("revoked", "ui")]
    finally:
        context.close()
