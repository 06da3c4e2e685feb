"""The ingester's per-device token bucket, with an injected clock."""

from __future__ import annotations

from edgefleet.cloud._telemetry._ingest import _device_key, _DeviceLimiter


def test_bucket_per_device_refills_at_the_rate() -> None:
    lim = _DeviceLimiter(rate_per_s=10.0, burst=5)
    assert [lim.allow("f/a", 0.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert lim.allow("f/b", 0.0)  # another device has its own bucket
    assert not lim.allow("f/a", 0.05)  # half a token
    assert lim.allow("f/a", 0.1)
    assert sum(lim.allow("f/a", 100.0) for _ in range(10)) == 5  # never more than the burst


def test_status_has_its_own_bucket_and_bad_topics_are_left_to_validation() -> None:
    assert _device_key("edgefleet/v1/f/cam-1/telemetry") == _device_key("edgefleet/v1/f/cam-1/events")
    assert _device_key("edgefleet/v1/f/cam-1/status") == "f/cam-1/status"
    assert _device_key("other/topic") is None


def test_the_table_of_buckets_is_bounded() -> None:
    lim = _DeviceLimiter(rate_per_s=1.0, burst=2, max_devices=100)
    for i in range(1000):
        lim.allow(f"f/d{i}", float(i))  # each device sends once, then its bucket refills and is forgotten
    assert len(lim._buckets) <= 101
