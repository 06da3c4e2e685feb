"""When a spooled message may go: the two delivery modes, and what the sender tracks for the controller's
acknowledgements.

``Delivery.CONTROLLER`` (the default): a message leaves the spool only once a controller replica has
stored it. The controllers publish, retained, on the device's ``ack`` topic the highest sequence up to
which everything is stored or was given up (the watermark); the sender trims the spool to it. What was
sent and is not covered by a watermark ``ack_timeout_s`` later is sent again, from the oldest spooled
entry; the timeout doubles while nothing is acknowledged (up to 8x) and the first pass after it sends at
most ``window`` entries ahead of the watermark, so a controller that is down is not flooded with copies
(the broker queues one of each for its session anyway). ``Delivery.BROKER``: the broker's PUBACK deletes
the entry, for setups without an edgefleet controller (nothing acknowledges there); a message can then be
lost when the broker forgets it.
"""

from __future__ import annotations

import enum
from collections import deque

__all__ = ["AckTracker", "Delivery"]


class Delivery(str, enum.Enum):
    """What proves a message delivered: a controller's acknowledgement, or the broker's PUBACK."""

    CONTROLLER = "controller"
    BROKER = "broker"


class AckTracker:
    """Messages sent on the current connection and not yet covered by a watermark, oldest first.

    Example::

        t = AckTracker(timeout_s=10.0, window=64)
        t.sent(entry_id=1, seq=100, at=0.0)
        t.covered(100)        # a watermark arrived: nothing outstanding any more
        t.due(now=20.0)       # False
    """

    def __init__(self, timeout_s: float, window: int) -> None:
        self.base_timeout_s = timeout_s
        self.timeout_s = timeout_s
        self.window = max(1, window)
        self._sent: deque[tuple[int, int, float]] = deque()  # (entry id, seq, sent at)
        self._recover_until: int | None = None  # entry id: until the cursor passes it, send little ahead
        self.max_sent_id = 0
        self.max_sent_seq = 0

    def reset(self) -> None:
        """A new connection: everything spooled is sent again from the oldest entry."""
        self._sent.clear()
        self._recover_until = None
        self.max_sent_id = 0

    @property
    def outstanding(self) -> int:
        return len(self._sent)

    def sent(self, entry_id: int, seq: int, at: float) -> None:
        self._sent.append((entry_id, seq, at))
        self.max_sent_id = max(self.max_sent_id, entry_id)
        self.max_sent_seq = max(self.max_sent_seq, seq)

    def covered(self, watermark: int) -> int:
        """Forget what ``watermark`` covers; returns how many of the outstanding it covered. Any progress
        brings the timeout back to its base."""
        n = 0
        while self._sent and self._sent[0][1] <= watermark:
            self._sent.popleft()
            n += 1
        if n:
            self.timeout_s = self.base_timeout_s
        return n

    def due(self, now: float) -> bool:
        """Whether the oldest outstanding message waited longer than the timeout."""
        return bool(self._sent) and now - self._sent[0][2] > self.timeout_s

    def oldest_wait(self, now: float) -> float:
        return now - self._sent[0][2] if self._sent else 0.0

    def rewound(self) -> None:
        """The sender goes back to the oldest entry: recover what was sent so far, a window at a time,
        and wait twice as long (at most 8x the base) before the next pass."""
        self._recover_until = self.max_sent_id
        self._sent.clear()
        self.timeout_s = min(self.timeout_s * 2, self.base_timeout_s * 8)

    def room(self, cursor: int) -> int | None:
        """How many entries may be sent now beyond the cursor (None: no limit but the MQTT window)."""
        if self._recover_until is None:
            return None
        if cursor >= self._recover_until:
            self._recover_until = None
            return None
        return max(0, self.window - len(self._sent))
