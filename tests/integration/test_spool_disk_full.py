"""The telemetry spool on a 1 MiB tmpfs that fills up: a clear error, nothing already spooled is lost or
corrupt, and spooling works again once space returns."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgefleet.edge._telemetry import Priority, Spool, SpoolError

pytestmark = [pytest.mark.integration]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=10)


def _payload(seq: int) -> bytes:
    return (b'{"header":{"sequence":"%d"},"pad":"' % seq) + os.urandom(2000).hex().encode() + b'"}'


def test_spool_disk_full_clear_error_nothing_corrupt_recovers(small_disk: Path) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 200_000)  # the space that "returns" later
    spool = Spool(small_disk / "spool.db", max_bytes=64 << 20)  # the disk fills before the spool's cap
    kept: dict[int, bytes] = {}
    try:
        with pytest.raises(SpoolError) as exc:
            for _ in range(10_000):
                payloads: dict[int, bytes] = {}

                def build(seq: int, payloads: dict[int, bytes] = payloads) -> bytes:
                    payloads[seq] = _payload(seq)
                    return payloads[seq]

                seq = spool.append(Priority.ROUTINE, "edgefleet/v1/f/d/telemetry", build)
                kept[seq] = payloads[seq]
        message = str(exc.value)
        assert "the disk is full" in message and "already spooled are kept" in message, message
        assert str(small_disk) in message
        assert len(kept) > 50, message  # it did fill up with real entries first

        # what was spooled before the disk filled is intact, in order, and still readable
        def check() -> None:
            entries = spool.read_after(0, 100_000)
            assert [e.seq for e in entries] == sorted(kept)
            assert all(e.payload == kept[e.seq] for e in entries)
            assert len(spool) == len(kept)
            with contextlib.closing(sqlite3.connect(f"file:{small_disk / 'spool.db'}?mode=ro", uri=True)) as db:
                assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

        check()
        with pytest.raises(SpoolError):  # still full: refused again, still clearly
            spool.append(Priority.CRITICAL, "edgefleet/v1/f/d/status", _payload)
        check()

        ballast.unlink()  # space returns
        after = spool.append(Priority.ROUTINE, "edgefleet/v1/f/d/telemetry", _payload)
        assert after > max(kept)
        first_ids = [e.id for e in spool.read_after(0, 10)]
        spool.ack(first_ids)  # the sender drains it as the broker acknowledges
        assert len(spool) == len(kept) + 1 - len(first_ids)
    finally:
        spool.close()
    reopened = Spool(small_disk / "spool.db")  # and the file opens cleanly afterwards
    try:
        seqs = [e.seq for e in reopened.read_after(0, 100_000)]
        assert seqs == [*sorted(kept)[len(first_ids) :], after]
        assert reopened.append(Priority.ROUTINE, "edgefleet/v1/f/d/telemetry", _payload) > after
    finally:
        reopened.close()
