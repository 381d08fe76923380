"""Linux inotify for the SQLite store: a file descriptor that becomes readable when a process
writes the database's write-ahead log (every commit does), so a waiting process sleeps until another
one commits instead of polling ``PRAGMA data_version``; and one that becomes readable when a file
arrives in a folder (:func:`arrivals`: ``forq_serve``'s drain file), so a server's event loop sleeps
until told to drain.

Three libc calls through :mod:`ctypes`; the PyPI wrappers (``inotify_simple``, ``inotify``) would be
a dependency for the same three calls and a struct parse. Where inotify is missing (another OS, a
file system without it, the per-user watch limit reached, a database not in WAL mode) :func:`watch`
answers None and the notifier polls, as it always could.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import sys
import threading

logger = logging.getLogger("forqapp.notify")

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_MOVE_SELF = 0x00000800
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_GONE = IN_MOVE_SELF | IN_DELETE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

_libc: ctypes.CDLL | None = None
_lock = threading.Lock()
_watches: dict[tuple[int, int, str], Watch | None] = {}  # (pid, thread, file) -> watch (None: unavailable)


class Watch:
    """An inotify instance watching one file (a database's ``-wal``) for writes. When the file goes
    (the last connection closed, a restore replaced it), the next :meth:`ensure` watches the new one."""

    def __init__(self, fd: int, path: str):
        self.fd = fd
        self.path = path
        self.wd: int | None = None

    def ensure(self) -> bool:
        """Watch the file if it is not watched yet; whether it is now."""
        if self.wd is None and _libc is not None:
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(self.path), IN_MODIFY | IN_MOVE_SELF | IN_DELETE_SELF)
            self.wd = wd if wd >= 0 else None
        return self.wd is not None

    def drain(self) -> bool:
        """Read every pending event; whether there was one (a write, the file gone, events lost)."""
        seen = False
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return seen
            except OSError:
                self.wd = None
                return True
            seen = True
            for offset in range(0, len(data) - _EVENT.size + 1, _EVENT.size):  # (no names: a file's watch)
                _wd, mask, _cookie, _length = _EVENT.unpack_from(data, offset)
                if mask & (_GONE | IN_Q_OVERFLOW):
                    self.wd = None  # watch the new file, if any, next time (a stale watch is removed)


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # (the parent's may have been held by a thread that did not follow)


os.register_at_fork(after_in_child=_after_fork)


def watch(path: str) -> Watch | None:
    """This thread's watch of the write-ahead log of the SQLite database at ``path`` (created on
    first use), or None where it cannot be watched now."""
    # Each watching thread has its own (a notifier's: two draining one descriptor would steal each
    # other's events), and so has a forked child.
    key = (os.getpid(), threading.get_ident(), path)
    try:
        found = _watches[key]
    except KeyError:
        with _lock:
            if key not in _watches:
                _watches[key] = _open(path + "-wal")
            found = _watches[key]
    return found if found is not None and found.ensure() else None


def _open(wal: str) -> Watch | None:
    try:
        fd = _instance()
    except (OSError, AttributeError) as exc:
        logger.info("no inotify (%s): waiting consumers poll every FORQ_WAKE_POLL_MS", exc)
        return None
    return None if fd is None else Watch(fd, wal)


def _instance() -> int | None:
    """A new non-blocking inotify descriptor (None: not Linux)."""
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        # The process's own symbols, libc's among them: ctypes.util.find_library("c") would run
        # `/sbin/ldconfig -p` in a child process, in every process that starts watching.
        _libc = ctypes.CDLL(None, use_errno=True)
    fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(fd)


def arrivals(directory: str) -> int | None:
    """A non-blocking descriptor that becomes readable when a file is created, moved in or touched
    in ``directory`` (its caller reads it empty with :func:`read_all` after each wake-up, and closes
    it), or None where inotify cannot watch it: then the caller polls."""
    try:
        fd = _instance()
    except (OSError, AttributeError):
        return None
    if fd is None:
        return None
    assert _libc is not None
    if _libc.inotify_add_watch(fd, os.fsencode(directory), IN_CREATE | IN_ATTRIB | IN_MOVED_TO) < 0:
        os.close(fd)  # (no such directory, the per-user watch limit reached)
        return None
    return fd


def read_all(fd: int) -> None:
    """Read ``fd``'s pending events, unparsed (:func:`arrivals`'s caller looks at the file itself)."""
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass
