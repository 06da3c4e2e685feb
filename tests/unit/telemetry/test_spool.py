"""The disk spool: priorities, bounded size, sequence numbers that survive restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgefleet.edge._telemetry import Priority, Spool, SpoolError


def put(spool: Spool, prio: Priority, body: bytes = b"x") -> int:
    return spool.append(prio, "t", lambda seq: body + str(seq).encode())


def test_sequences_increase_and_persist(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db")
    seqs = [put(spool, Priority.ROUTINE) for _ in range(3)]
    will = spool.reserve_sequence()
    spool.close()
    again = Spool(tmp_path / "s.db")
    nxt = put(again, Priority.ROUTINE)
    assert seqs == sorted(seqs) and seqs[1] == seqs[0] + 1
    assert will == seqs[-1] + 1 and nxt == will + 1
    assert [e.seq for e in again.read_after(0, 10)] == [*seqs, nxt]  # entries survive a restart
    again.close()


def test_fresh_spool_starts_above_any_earlier_install(tmp_path: Path) -> None:
    a = put(Spool(tmp_path / "a.db"), Priority.ROUTINE)
    b = put(Spool(tmp_path / "b.db"), Priority.ROUTINE)  # device reinstalled: new spool file
    assert b > a


def test_full_spool_drops_lowest_priority_oldest_first() -> None:
    spool = Spool(":memory:", max_entries=4)
    bulk = put(spool, Priority.BULK)
    r1 = put(spool, Priority.ROUTINE)
    c1 = put(spool, Priority.CRITICAL)
    r2 = put(spool, Priority.ROUTINE)
    r3 = put(spool, Priority.ROUTINE)  # drops the bulk entry
    assert bulk not in [e.seq for e in spool.read_after(0, 10)]
    c2 = put(spool, Priority.CRITICAL)  # drops r1, the oldest routine
    assert [e.seq for e in spool.read_after(0, 10)] == [c1, r2, r3, c2]
    put(spool, Priority.CRITICAL)
    put(spool, Priority.CRITICAL)
    put(spool, Priority.CRITICAL)  # only now a critical entry goes
    assert spool.stats().dropped == {"bulk": 1, "routine": 3, "critical": 1}
    assert r1 not in [e.seq for e in spool.read_after(0, 10)]


def test_byte_bound_and_ack() -> None:
    spool = Spool(":memory:", max_entries=1000, max_bytes=100)
    for _ in range(10):
        put(spool, Priority.ROUTINE, b"y" * 20)
    st = spool.stats()
    assert st.bytes <= 100 and st.dropped["routine"] > 0
    entries = spool.read_after(0, 2)
    spool.ack([e.id for e in entries])
    spool.ack([entries[0].id])  # a second ack (duplicate PUBACK) changes nothing
    assert len(spool) == st.pending - 2


def test_closed_spool_raises() -> None:
    spool = Spool(":memory:")
    spool.close()
    with pytest.raises(SpoolError):
        put(spool, Priority.ROUTINE)


def test_a_full_disk_is_recognised_on_python_3_10(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 (JetPack 6) has no ``sqlite3.SQLITE_FULL`` and no ``sqlite_errorcode``: the check must
    still answer (it raised AttributeError there, found by ``mypy --python-version 3.10``)."""
    import sqlite3

    from edgefleet.edge._telemetry import _spool

    monkeypatch.delattr(sqlite3, "SQLITE_FULL", raising=False)
    assert _spool._disk_full(sqlite3.OperationalError("database or disk is full"))
    assert not _spool._disk_full(sqlite3.OperationalError("no such table: x"))
