"""paho's MQTT client with buffered socket reads, for the ingest replicas.

paho-mqtt 2.2 reads each incoming packet with at least three ``recv`` calls (the command byte, each byte of
the remaining length, then the body) and goes back to ``select`` between packets; at the ingest's message
rates those system calls are most of paho's ~57 us per message (docs/telemetry.md). This subclass reads up to
64 KiB per ``recv`` and serves paho's small reads from that buffer, and ``loop_read`` keeps processing
packets while the buffer holds bytes (``select`` cannot see them). It relies on paho's ``_sock_recv`` /
``_sock_close`` hooks, which is why ``constraints.txt`` pins paho-mqtt; the ingest tests run through it.
"""

from __future__ import annotations

from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import MQTTErrorCode

__all__ = ["BufferedClient"]

_READ_BYTES = 65536


class BufferedClient(mqtt.Client):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rbuf = b""
        self._roff = 0

    def _buffered(self) -> int:
        return len(self._rbuf) - self._roff

    def _sock_recv(self, bufsize: int) -> bytes:
        if self._roff >= len(self._rbuf):
            data = super()._sock_recv(_READ_BYTES)  # BlockingIOError / ConnectionError propagate as before
            if len(data) <= bufsize:
                return data
            self._rbuf, self._roff = data, 0
        end = self._roff + bufsize
        chunk = self._rbuf[self._roff : end]
        self._roff = min(end, len(self._rbuf))
        return chunk

    def _sock_close(self) -> None:
        self._rbuf, self._roff = b"", 0  # bytes of a closed connection never reach the next one
        super()._sock_close()

    def loop_read(self, max_packets: int = 1) -> MQTTErrorCode:
        rc = super().loop_read(max_packets)
        while rc == MQTTErrorCode.MQTT_ERR_SUCCESS and self._sock is not None and self._buffered() > 0:
            rc = super().loop_read(max_packets)
        return rc
