"""``manage.py forq_backup``: a copy of the queue's SQLite database while it serves."""

from __future__ import annotations

import io

import pytest


@pytest.mark.django_db(transaction=True)
def test_forq_backup_copies_the_database_while_it_is_written(tmp_path):
    """manage.py forq_backup: a consistent, checked copy of the queue's SQLite file while another
    connection keeps sending; the copy is in WAL mode and opens as a forqapp database."""
    import sqlite3
    import threading

    from django.core.management import CommandError, call_command
    from django.db import connection, connections

    import forqapp

    if connection.vendor != "sqlite":
        with pytest.raises(CommandError, match="use its own backups"):
            call_command("forq_backup", str(tmp_path / "copy.sqlite3"))
        return
    if connection.settings_dict["NAME"] == ":memory:" or "mode=memory" in str(connection.settings_dict["NAME"]):
        pytest.skip("the test database is in memory")
    forqapp.send_many("backed-up", [f"m{i}" for i in range(500)])
    stop = threading.Event()

    def keep_sending():
        while not stop.is_set():
            forqapp.send("still-written", "x")
        connections.close_all()

    writer = threading.Thread(target=keep_sending)
    writer.start()
    try:
        out = io.StringIO()
        call_command("forq_backup", str(tmp_path / "copy.sqlite3"), stdout=out)
    finally:
        stop.set()
        writer.join(10)
    assert "checked" in out.getvalue(), out.getvalue()
    copy = sqlite3.connect(tmp_path / "copy.sqlite3")
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert copy.execute("SELECT COUNT(*) FROM messages WHERE queue = 'backed-up'").fetchone()[0] == 500
    copy.close()
    with pytest.raises(CommandError, match="exists"):  # never over a file
        call_command("forq_backup", str(tmp_path / "copy.sqlite3"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite3"]  # (no temporary left)
    # A backup that fails part-way leaves nothing at PATH: a retry is not refused.
    import forqapp.management.commands.forq_backup as command

    def broken(source_path, target_path):
        with open(target_path, "wb") as f:
            f.write(b"half a copy")
        raise sqlite3.OperationalError("disk I/O error")

    real = command._copy
    command._copy = broken
    try:
        with pytest.raises(CommandError, match="the backup failed: disk I/O error"):
            call_command("forq_backup", str(tmp_path / "again.sqlite3"))
    finally:
        command._copy = real
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite3"]
    call_command("forq_backup", str(tmp_path / "again.sqlite3"), stdout=io.StringIO())
    assert (tmp_path / "again.sqlite3").exists()
