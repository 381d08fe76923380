# ruff: noqa: S106  (test passwords)
"""The login throttle's count before the check (forqapp.login_throttle, services.throttles):
best-effort when the database cannot write, logins being checked kept apart from failures, and
each login counted in the window it was let through in. Concurrency is driven with threads held
in the password check, never with timing."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_login_failed
from django.db import connection, connections
from django.test import Client

from forqapp import errors, store
from tests.conftest import patch_clock

pytestmark = pytest.mark.django_db(transaction=True)

LOGIN_URLS = ["/ui/login/", "/admin/login/"]
BLOCKED = "Too many failed logins; try again in"
WRONG = "Please enter"  # "…the correct username and password" (the admin's and the UI's wording)
HOLD_S = 60  # how long a held thread waits for the test's go at most: a hang's bound, never a timing


def log_in(url: str, username: str, password: str, address: str):
    """A login from ``address`` with a fresh client; returns (status, page, logged in?)."""
    c = Client()
    response = c.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)
    return response.status_code, response.content.decode(), "_auth_user_id" in c.session


def in_thread(fn):
    """``fn`` for a thread of its own: its database connections closed when it is done."""

    def run(*args):
        try:
            return fn(*args)
        finally:
            connections.close_all()

    return run


def _unavailable():
    if connection.vendor == "postgresql":
        import psycopg

        return psycopg.OperationalError("server closed the connection unexpectedly")
    import sqlite3

    return sqlite3.OperationalError("database or disk is full")


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_the_right_password_logs_in_when_the_count_before_the_check_cannot_be_written(url, staff, monkeypatch):
    """A database that cannot write now (a full disk, a busy write lock, a server away) counts
    nothing first: the login is checked after a read of its block, as before the count came first
    (it answered 503: nobody could log in, not even to the admin). A wrong one is still refused."""
    monkeypatch.setattr(errors, "_said", {})
    st_class = store.store_class(connection.vendor)

    def refuse(*args, **kwargs):
        raise _unavailable()

    monkeypatch.setattr(st_class, "login_attempt", refuse)
    c = Client()
    response = c.post(url, {"username": "staff", "password": "pw-staff-123"}, REMOTE_ADDR="10.7.0.1")
    assert response.status_code == 302 and "_auth_user_id" in c.session
    status, page, ok = log_in(url, "staff", "wrong", "10.7.0.1")
    assert (status, ok) == (200, False) and WRONG in page


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_the_second_keys_count_failing_releases_the_first(url, staff, monkeypatch):
    """The username's count fails after the address's was taken: the address's is given back (the
    login checked as before), and a release or a failure that cannot be written is no 503."""
    st_class = store.store_class(connection.vendor)
    original = st_class.login_attempt

    def username_refused(self, key, *args):
        if key.startswith("login-user:"):
            raise _unavailable()
        return original(self, key, *args)

    monkeypatch.setattr(st_class, "login_attempt", username_refused)
    status, _, ok = log_in(url, "staff", "pw-staff-123", "10.7.0.2")
    assert status == 302 and ok
    row = _row("login-ip:10.7.0.2")
    assert row is not None and row[1] == 0, row  # nothing left counted as being checked
    monkeypatch.undo()

    def cannot_write(*args, **kwargs):
        raise _unavailable()

    monkeypatch.setattr(errors, "_said", {})
    monkeypatch.setattr(st_class, "login_checked", cannot_write)
    status, _, ok = log_in(url, "staff", "pw-staff-123", "10.7.0.3")
    assert status == 302 and ok
    status, page, ok = log_in(url, "staff", "wrong", "10.7.0.3")
    assert (status, ok) == (200, False) and WRONG in page


def _row(key: str):
    """(failures, pending) of a throttle key, or None."""
    from forqapp.models import AuthThrottle

    found = AuthThrottle.objects.filter(address=key).values_list("failures", "pending").first()
    return found


class Held:
    """Password checks of ``password`` held until :meth:`go`: ``arrived`` counts them in."""

    def __init__(self, monkeypatch, password: str, parties: int) -> None:
        self.password, self.arrived, self.release = password, threading.Barrier(parties), threading.Event()
        original = AbstractBaseUser.check_password
        held = self

        def check_password(user, raw_password):
            if raw_password == held.password and not held.release.is_set():
                held.arrived.wait(timeout=HOLD_S)
                held.release.wait(timeout=HOLD_S)
            return original(user, raw_password)

        monkeypatch.setattr(AbstractBaseUser, "check_password", check_password)

    def go(self) -> None:
        self.release.set()


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_six_right_passwords_at_once_from_one_address_all_log_in(url, monkeypatch):
    """An office behind one address: six people log in at once. Five are being checked when the
    sixth comes; none has failed, so the sixth waits for one of them to end and logs in (it was
    refused "Too many failed logins; try again in 15 minutes")."""
    for i in range(6):
        User.objects.create_user(f"office-{i}", password="pw-office-123", is_staff=True, is_superuser=True)
    st_class = store.store_class(connection.vendor)
    original = st_class.login_attempt
    tried = threading.Semaphore(0)
    all_tried = threading.Event()
    lock, count = threading.Lock(), [0]

    def counting(self, key, *args):
        result = original(self, key, *args)
        if key.startswith("login-ip:"):
            with lock:
                count[0] += 1
                if count[0] >= 6:
                    all_tried.set()
            tried.release()
        return result

    monkeypatch.setattr(st_class, "login_attempt", counting)
    real_check = AbstractBaseUser.check_password

    def check_password(user, raw_password):  # the checks let through wait for the sixth to come
        all_tried.wait(timeout=HOLD_S)
        return real_check(user, raw_password)

    monkeypatch.setattr(AbstractBaseUser, "check_password", check_password)
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(in_thread(lambda i: log_in(url, f"office-{i}", "pw-office-123", "10.7.1.1")),
                                range(6)))
    assert all_tried.is_set()
    assert [(status, ok) for status, _, ok in results] == [(302, True)] * 6, [page[-600:] for _, page, _ in results]
    assert _row("login-ip:10.7.1.1") == (0, 0)


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_a_right_and_a_wrong_password_at_once_after_three_failures(url, staff, monkeypatch):
    """Three failures, then the right password and a wrong one are checked at the same time: the
    right one logs in, and only the fifth real failure blocks the key (the two being checked were
    counted as failures: the wrong one's blocked the key after four real ones)."""
    address = "10.7.2.2"
    for _ in range(3):
        status, page, ok = log_in(url, "staff", "wrong", address)
        assert not ok and WRONG in page
    both, wrong_counted = threading.Barrier(2), threading.Event()
    real_check = AbstractBaseUser.check_password

    def check_password(user, raw_password):  # each waits for the other: both are being checked
        both.wait(timeout=HOLD_S)
        if raw_password == "pw-staff-123":  # and the right one ends after the wrong one was counted
            wrong_counted.wait(timeout=HOLD_S)
        return real_check(user, raw_password)

    def counted(sender, credentials, request=None, **kwargs):  # after record_failure (connected first)
        wrong_counted.set()

    monkeypatch.setattr(AbstractBaseUser, "check_password", check_password)
    user_login_failed.connect(counted, dispatch_uid="test_login_throttle.counted")
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            right, wrong = pool.map(in_thread(lambda pw: log_in(url, "staff", pw, address)), ["pw-staff-123", "wrong-4"])
    finally:
        user_login_failed.disconnect(dispatch_uid="test_login_throttle.counted")
    monkeypatch.undo()
    assert wrong_counted.is_set()
    assert right[2] and right[0] == 302, right[1][-600:]
    assert not wrong[2] and WRONG in wrong[1]
    status, page, ok = log_in(url, "staff", "wrong-5", address)  # the fifth failure: checked, then blocked
    assert not ok and WRONG in page
    status, page, ok = log_in(url, "staff", "pw-staff-123", address)
    assert not ok and BLOCKED in page
    assert _row("login-ip:" + address) == (5, 0)


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_a_login_counted_before_the_window_ended_gives_nothing_to_the_next_one(url, monkeypatch):
    """An attacker holds four right logins of their own account being checked as the window ends,
    then guesses other accounts' passwords from the same address: their releases, after the new
    window began, must not take the new window's guesses off its count (9 wrong passwords were
    checked in one window, not 5)."""
    User.objects.create_user("attacker", password="pw-attacker-123", is_staff=True)
    clock = [1_900_000_000_000]
    patch_clock(monkeypatch, lambda: clock[0])
    address = "10.7.3.3"
    held = Held(monkeypatch, "pw-attacker-123", parties=5)
    with ThreadPoolExecutor(max_workers=4) as pool:
        own = [pool.submit(in_thread(log_in), url, "attacker", "pw-attacker-123", address) for _ in range(4)]
        held.arrived.wait(timeout=HOLD_S)  # all four counted, being checked
        clock[0] += 900_000 + 1  # the window (FORQ_LOGIN_FAILURE_WINDOW_S) ended
        pages = [log_in(url, f"victim-{k}", "guess", address)[1] for k in range(4)]
        held.go()
        assert [f.result()[2] for f in own] == [True] * 4
    pages += [log_in(url, f"victim-{k}", "guess", address)[1] for k in range(4, 12)]
    checked = [page for page in pages if WRONG in page]
    assert len(checked) == 5, [BLOCKED in page for page in pages]
    assert all(BLOCKED in page for page in pages[5:])


def test_a_login_refused_only_for_others_being_checked_is_told_to_try_again_in_a_moment(staff, monkeypatch):
    """Five logins being checked (none failed) and no wait: the sixth is told to try again in a
    moment, not that the key is blocked, and it is counted as nothing."""
    from forqapp.services import throttles

    monkeypatch.setattr(throttles, "LOGIN_BUSY_WAIT_S", 0.0)
    key = "login-ip:10.7.4.4"
    taken = [throttles.login_attempt([key]) for _ in range(5)]
    assert all(t.windows for t in taken)
    status, page, ok = log_in("/ui/login/", "staff", "pw-staff-123", "10.7.4.4")
    assert not ok and "Too many logins at once; try again in a moment." in page and BLOCKED not in page
    assert _row(key) == (0, 5)
    for t in taken:
        throttles.login_released(t.windows)
    assert _row(key) == (0, 0)
    status, page, ok = log_in("/ui/login/", "staff", "pw-staff-123", "10.7.4.4")
    assert status == 302 and ok
