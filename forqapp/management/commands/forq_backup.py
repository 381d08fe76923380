"""``manage.py forq_backup PATH``: a consistent copy of the queue's SQLite database while it serves."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from ...services import alias


class Command(BaseCommand):
    help = (
        "Copy the queue's SQLite database (FORQ_DATABASE's, or --database's) to PATH while servers and "
        "workers keep running: one consistent snapshot (SQLite's online backup, in one step: writers "
        "go on meanwhile), checked, in WAL mode as the original. PATH must not exist. To restore: stop "
        "every process, put the copy in the database file's place (and remove its -wal and -shm "
        "files), start again. On PostgreSQL use its own backups (pg_dump, WAL archiving)."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", help="The file to write (it must not exist).")
        parser.add_argument("--database", default=None,
                            help="The database alias (default: FORQ_DATABASE's, the queue's database).")

    def handle(self, *args, **options):
        using = options["database"] or alias()
        if using not in connections.databases:
            raise CommandError(f"no database {using!r} in DATABASES")
        settings = connections[using].settings_dict
        if connections[using].vendor != "sqlite":
            raise CommandError(f"the database {using!r} is {connections[using].display_name}: use its own backups "
                               "(pg_dump, continuous WAL archiving), see the PostgreSQL page")
        source_path = str(settings["NAME"])
        if source_path == ":memory:" or not os.path.exists(source_path):
            raise CommandError(f"no database file at {source_path!r}")
        path = options["path"]
        if os.path.lexists(path):
            raise CommandError(f"{path} exists: give a path that does not")
        started = time.monotonic()
        # Written under a temporary name beside PATH, moved there once checked: a backup that fails
        # part-way leaves nothing at PATH (a retry is not refused), and PATH is never overwritten.
        temporary = f"{path}.{os.getpid()}.partial"
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            messages, check = _copy(source_path, temporary)
            if check != "ok":
                raise CommandError(f"the copy failed its check: {check}")
            _move_to(temporary, path)
        except (OSError, sqlite3.Error) as exc:
            raise CommandError(f"the backup failed: {exc}") from None
        finally:
            for leftover in (temporary, f"{temporary}-wal", f"{temporary}-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
        size = os.path.getsize(path) / 1e6
        self.stdout.write(f"forq_backup: {source_path} → {path} ({size:.1f} MB, {messages:,} messages, "
                          f"checked) in {time.monotonic() - started:.1f} s")


def _move_to(temporary: str, path: str) -> None:
    """``temporary`` at ``path``, which must not exist: a hard link (refused if ``path`` appeared
    meanwhile), or a rename where the file system has no links."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise CommandError(f"{path} exists: give a path that does not") from None
    except OSError:
        if os.path.lexists(path):
            raise CommandError(f"{path} exists: give a path that does not") from None
        os.replace(temporary, path)


def _copy(source_path: str, target_path: str) -> tuple[int, str]:
    """Copy ``source_path`` to ``target_path`` (SQLite's online backup, in one step: one read
    transaction, a consistent snapshot) in WAL mode as the original: (messages in it, quick_check)."""
    source = sqlite3.connect(source_path, timeout=30)  # (only read: in WAL mode, writers go on)
    try:
        target = sqlite3.connect(target_path)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=WAL")  # as the original (migrations set it)
            ((check,),) = target.execute("PRAGMA quick_check").fetchall()
            has_messages = target.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages'").fetchone()
            messages = target.execute("SELECT COUNT(*) FROM messages").fetchone()[0] if has_messages else 0
        finally:
            target.close()  # (the last connection: checkpointed, its -wal and -shm files removed)
    finally:
        source.close()
    return messages, check
