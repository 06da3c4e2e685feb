"""A bounded SQLite (WAL) disk spool with priority classes.

Every outgoing message is appended here first, with its per-device sequence number assigned under the
spool's lock, so id order is sequence order. The sender reads entries in id order, each with the sequence
of the entry before it (``prev``, the delivery chain of docs/telemetry.md), and deletes them once they are
acknowledged: up to a controller's watermark (:meth:`Spool.trim`), or one by one on the broker's PUBACK
with ``delivery: broker`` (:meth:`Spool.ack`). When the spool is full, the oldest entries of the lowest
priority present are dropped and counted; critical entries (status, swap events) go only when nothing
else is left.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ._errors import SpoolError

__all__ = ["Priority", "Spool", "SpoolEntry", "SpoolStats"]

_log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spool ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL, priority INTEGER NOT NULL,"
    " topic TEXT NOT NULL, payload BLOB NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL,"
    " content_type TEXT NOT NULL, created REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS spool_priority ON spool (priority, id)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


_WAL_LIMIT = 256 * 1024


_SQLITE_FULL = getattr(sqlite3, "SQLITE_FULL", 13)  # the constant is Python 3.11+; JetPack 6 runs 3.10


def _disk_full(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(exc)


class Priority(enum.IntEnum):
    """Drop order when the spool is full: BULK first, then ROUTINE, CRITICAL last."""

    BULK = 0  # detections
    ROUTINE = 1  # periodic telemetry
    CRITICAL = 2  # status, swap/rollback, engine build, errors


@dataclass(frozen=True)
class SpoolEntry:
    id: int
    seq: int
    priority: Priority
    topic: str
    payload: bytes
    qos: int
    retain: bool
    content_type: str
    prev: int = 0  # sequence of the entry before this one in the spool when read; 0: none is older


@dataclass(frozen=True)
class SpoolStats:
    pending: int
    bytes: int
    dropped: dict[str, int]
    appended: int
    acked: int
    acked_seq: int = 0  # the highest acknowledgement watermark received (controller delivery)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class Spool:
    """The disk spool. Thread-safe; one connection guarded by a lock (appends are short transactions).

    ``max_entries`` and ``max_bytes`` bound it; ``path=":memory:"`` keeps it in RAM (tests, benchmarks).
    """

    def __init__(self, path: str | Path, *, max_entries: int = 100_000, max_bytes: int = 256 * 2**20) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise SpoolError("spool limits must be positive")
        self.path = str(path)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # keep the write-ahead log small: on a nearly full disk it must not hold the free space
            self._db.execute("PRAGMA wal_autocheckpoint=64")
            self._db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
            for stmt in _SCHEMA:
                self._db.execute(stmt)
            row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM spool").fetchone()
            seq_row = self._db.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
        except sqlite3.Error as exc:
            raise SpoolError(f"cannot open spool {self.path}: {exc}") from exc
        self._count = int(row[0])
        self._bytes = int(row[1])
        # A fresh spool starts at the clock in microseconds, so a reinstalled device never reuses a
        # sequence number the controller already stored (it deduplicates on device and sequence).
        self._next_seq = int(seq_row[0]) if seq_row else max(1, time.time_ns() // 1000)
        acked_row = self._db.execute("SELECT value FROM meta WHERE key = 'acked_seq'").fetchone()
        self._acked_seq = int(acked_row[0]) if acked_row else 0
        self._dropped = {p.name.lower(): 0 for p in Priority}
        self._appended = 0
        self._acked = 0
        self._listeners: list[Callable[[], None]] = []
        self._closed = False

    # --- writing -----------------------------------------------------------------------------------
    def reserve_sequence(self) -> int:
        """Take the next sequence number for a message that does not go through the spool (Last Will)."""
        with self._lock:
            return self._take_seq()

    def append(
        self,
        priority: Priority,
        topic: str,
        build: Callable[[int], bytes],
        *,
        qos: int = 1,
        retain: bool = False,
        content_type: str = "application/json",
    ) -> int:
        """Assign the next sequence number, build the payload with it and store it. Returns the sequence."""
        with self._lock:
            self._check_open()
            seq = self._take_seq(commit=False)
            payload = build(seq)
            size = len(payload)
            row = (seq, int(priority), topic, payload, qos, int(retain), content_type, time.time())
            try:
                try:
                    self._insert(row, size)
                except sqlite3.OperationalError as exc:
                    if not _disk_full(exc):
                        raise
                    self._rollback()
                    # the log may hold the space: fold it into the database, truncate it, retry once
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    self._insert(row, size)
            except sqlite3.Error as exc:
                self._rollback()
                if _disk_full(exc):
                    raise SpoolError(
                        f"cannot write spool {self.path}: the disk is full; the {self._count} message(s) "
                        "already spooled are kept, new ones are refused until space returns"
                    ) from exc
                raise SpoolError(f"cannot write spool {self.path}: {exc}") from exc
            self._count += 1
            self._bytes += size
            self._appended += 1
            listeners = list(self._listeners)
        for notify in listeners:
            notify()
        return seq

    def _insert(self, row: tuple[object, ...], size: int) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._make_room(size)
        self._db.execute(
            "INSERT INTO spool (seq, priority, topic, payload, qos, retain, content_type, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?)", (self._next_seq,))
        self._db.execute("COMMIT")

    def _take_seq(self, *, commit: bool = True) -> int:
        seq = self._next_seq
        self._next_seq += 1
        if commit:
            self._check_open()
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?)", (self._next_seq,))
        return seq

    def _make_room(self, size: int) -> None:
        """Drop the oldest entries of the lowest priority present until one more entry of ``size`` fits."""
        while self._count > 0 and (self._count + 1 > self.max_entries or self._bytes + size > self.max_bytes):
            row = self._db.execute(
                "SELECT id, priority, LENGTH(payload) FROM spool ORDER BY priority, id LIMIT 1"
            ).fetchone()
            if row is None:
                break
            self._db.execute("DELETE FROM spool WHERE id = ?", (row[0],))
            self._count -= 1
            self._bytes -= int(row[2])
            prio = Priority(int(row[1]))
            self._dropped[prio.name.lower()] += 1
            log = _log.warning if prio is Priority.CRITICAL else _log.debug
            log("telemetry spool full: dropped a %s entry", prio.name.lower())

    @property
    def next_sequence(self) -> int:
        """The sequence number the next message will get."""
        with self._lock:
            return self._next_seq

    def skip_sequences_to(self, seq: int) -> None:
        """Number the next messages from ``seq`` on (never backwards): a controller acknowledged numbers
        this spool has not given out yet, so it holds messages of an earlier install of the device."""
        with self._lock:
            self._check_open()
            if seq > self._next_seq:
                self._next_seq = seq
                self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?)", (seq,))

    # --- reading -----------------------------------------------------------------------------------
    def read_after(self, after_id: int, limit: int) -> list[SpoolEntry]:
        """Up to ``limit`` entries with id > ``after_id``, oldest first, each with ``prev``: the sequence of
        the entry before it in the spool now (0 when there is none)."""
        with self._lock:
            self._check_open()
            rows = self._db.execute(
                "SELECT id, seq, priority, topic, payload, qos, retain, content_type FROM spool"
                " WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, limit),
            ).fetchall()
            if not rows:
                return []
            before = self._db.execute(
                "SELECT seq FROM spool WHERE id < ? ORDER BY id DESC LIMIT 1", (int(rows[0][0]),)
            ).fetchone()
        prev = int(before[0]) if before else 0
        out = []
        for r in rows:
            seq = int(r[1])
            out.append(
                SpoolEntry(int(r[0]), seq, Priority(int(r[2])), r[3], bytes(r[4]), int(r[5]), bool(r[6]), r[7], prev)
            )
            prev = seq
        return out

    def trim(self, watermark: int) -> int:
        """Delete every entry with a sequence up to ``watermark`` (a controller stored them, or the chain
        says they were given up) and remember the watermark; returns how many entries went."""
        with self._lock:
            self._check_open()
            if watermark <= self._acked_seq:
                return 0  # everything up to it went with an earlier watermark
            try:
                self._db.execute("BEGIN IMMEDIATE")
                # id order is sequence order: the newest entry covered, found from the top (the entries not
                # acknowledged yet are the few scanned)
                top = self._db.execute(
                    "SELECT id FROM spool WHERE seq <= ? ORDER BY id DESC LIMIT 1", (watermark,)
                ).fetchone()
                removed = removed_bytes = 0
                if top is not None:
                    row = self._db.execute(
                        "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM spool WHERE id <= ?", (top[0],)
                    ).fetchone()
                    self._db.execute("DELETE FROM spool WHERE id <= ?", (top[0],))
                    removed, removed_bytes = int(row[0]), int(row[1])
                if watermark > self._acked_seq:
                    self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('acked_seq', ?)", (watermark,))
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise SpoolError(f"cannot write spool {self.path}: {exc}") from exc
            self._acked_seq = max(self._acked_seq, watermark)
            self._count -= removed
            self._bytes -= removed_bytes
            self._acked += removed
            return removed

    def ack(self, ids: Iterable[int]) -> None:
        """Delete acknowledged entries (ids already gone, dropped while in flight, are ignored)."""
        id_list = list(ids)
        if not id_list:
            return
        with self._lock:
            self._check_open()
            try:
                self._db.execute("BEGIN IMMEDIATE")
                removed = 0
                removed_bytes = 0
                for start in range(0, len(id_list), 500):
                    chunk = id_list[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    where = f"WHERE id IN ({marks})"
                    row = self._db.execute(
                        f"SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM spool {where}",  # noqa: S608
                        chunk,
                    ).fetchone()
                    self._db.execute(f"DELETE FROM spool {where}", chunk)  # noqa: S608
                    removed += int(row[0])
                    removed_bytes += int(row[1])
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise SpoolError(f"cannot write spool {self.path}: {exc}") from exc
            self._count -= removed
            self._bytes -= removed_bytes
            self._acked += removed

    # --- observation and lifecycle ------------------------------------------------------------------
    def add_listener(self, notify: Callable[[], None]) -> None:
        """Call ``notify()`` (outside the lock) after every append."""
        with self._lock:
            self._listeners.append(notify)

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(
                self._count, self._bytes, dict(self._dropped), self._appended, self._acked, self._acked_seq
            )

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SpoolError(f"spool {self.path} is closed")

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            _log.debug("rollback failed", exc_info=True)
