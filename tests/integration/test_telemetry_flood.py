"""A device flooding MQTT telemetry against a real Mosquitto: the ingester drops what is over that
device's rate limit, counts it per device, and every other device's messages are all stored.

The flooding device deletes on the broker's PUBACK (``delivery: broker``): with controller delivery what
the limit dropped is never acknowledged, so an agent keeps it and sends it again later (its spool bounds
how much), which is what the quiet device here relies on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgefleet.edge._telemetry import Delivery, Identity, MqttPublisher, Priority, Spool, parse_broker_url

from .telemetry_broker import Mosquitto, wait_for
from .test_telemetry_mqtt import Arrivals, ingester, publisher, telemetry

pytestmark = [pytest.mark.integration]

RATE, BURST, FLOOD = 20.0, 50, 600


def test_flood_from_one_device_is_rate_limited_others_unaffected(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    from edgefleet.cloud._telemetry import TelemetryStore

    broker = Mosquitto(tmp_path / "mosquitto").start()
    store = TelemetryStore(create_engine(f"sqlite:///{tmp_path / 'controller.db'}"))
    arrivals = Arrivals()
    ing = ingester(broker.url, store, arrivals, client_id="itest-flood", device_rate_per_s=RATE, device_burst=BURST)
    flood = MqttPublisher(
        parse_broker_url(broker.url), Identity("itest", "cam-flood"), Spool(":memory:"), delivery=Delivery.BROKER
    )
    quiet = publisher(broker.url, "cam-quiet")
    flood.start()
    quiet.start()
    try:
        t0 = time.monotonic()
        sent_quiet = []
        for i in range(FLOOD):
            flood.publish("telemetry", telemetry(), Priority.ROUTINE)
            if i % 60 == 0:
                sent_quiet.append(quiet.publish("telemetry", telemetry(), Priority.ROUTINE))
        assert flood.flush(20) and quiet.flush(10)
        assert wait_for(lambda: ing.stats().received >= FLOOD + len(sent_quiet), 20)
        took = time.monotonic() - t0  # all of it reached the ingester within this time
        assert wait_for(lambda: len(arrivals.get("cam-quiet", "telemetry")) >= len(sent_quiet), 10)
        time.sleep(0.3)  # the writer thread drains its last batch
        stats = ing.stats()
    finally:
        flood.stop(2)
        quiet.stop(2)
        ing.stop()
        broker.stop()
    stored_flood = len(arrivals.get("cam-flood", "telemetry"))
    limited = stats.rate_limited.get("itest/cam-flood", 0)
    assert limited > 0 and stored_flood + limited == FLOOD, (stored_flood, limited, took)
    assert stored_flood <= BURST + RATE * (took + 1.0) + 5, (stored_flood, took)
    assert stats.rejected.get("rate_limited") == limited
    # the quiet device lost nothing, in order; it is not listed as limited
    assert arrivals.get("cam-quiet", "telemetry") == sent_quiet
    assert "itest/cam-quiet" not in stats.rate_limited
