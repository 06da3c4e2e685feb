"""The MQTT topic scheme of edgefleet telemetry, spelled once for the agent, the controller and the
broker ACL the controller generates::

    edgefleet/v1/<fleet>/<device>/<kind>

``<kind>`` is one a device publishes (:data:`TOPIC_KINDS`: ``status``, ``telemetry``, ``events``) or
:data:`ACK_KIND` (``ack``: the controllers' retained acknowledgement watermark, which only the device
reads). The controllers subscribe through the shared subscription
``$share/<group>/edgefleet/v1/<fleet or +>/+/<kind>`` (:func:`topic_filters`, group
:data:`INGEST_SHARE_GROUP` by default). ``<fleet>`` and ``<device>`` are one topic level each
(:func:`topic_level_problem`); :func:`parse_topic` also holds them to the name rule
(:data:`~edgefleet.sdk.kit.NAME_RE`; a fleet may have capitals).

Example::

    from edgefleet.sdk.kit import device_topic, parse_topic, topic_filters

    assert device_topic("lab", "cam-1", "telemetry") == "edgefleet/v1/lab/cam-1/telemetry"
    assert parse_topic("edgefleet/v1/lab/cam-1/ack") == ("lab", "cam-1", "ack")
    assert topic_filters(kinds=("status",), share_group="edgefleet-ingest") == [
        "$share/edgefleet-ingest/edgefleet/v1/+/+/status"
    ]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from ._errors import EdgefleetError
from ._names import NAME_RE

__all__ = [
    "ACK_KIND",
    "INGEST_SHARE_GROUP",
    "TOPIC_KINDS",
    "TOPIC_ROOT",
    "AclTopics",
    "TopicError",
    "ack_topic",
    "acl_topics",
    "device_topic",
    "parse_topic",
    "topic_filters",
    "topic_level_problem",
]

TOPIC_ROOT = "edgefleet/v1"
TOPIC_KINDS = ("status", "telemetry", "events")  # what a device publishes
ACK_KIND = "ack"  # what the controllers publish to a device (retained)
INGEST_SHARE_GROUP = "edgefleet-ingest"  # the controller replicas' shared subscription group

_ROOT = tuple(TOPIC_ROOT.split("/"))
_ALL_KINDS = frozenset((*TOPIC_KINDS, ACK_KIND))
# The name rule, capitals allowed: the controller has always stored fleets such as "Plant-A".
_FLEET_RE = re.compile(NAME_RE.pattern, re.IGNORECASE | re.ASCII)
_NOT_A_LEVEL = re.compile(r"\A(?:\$|\Z)|[/+#\x00]")  # empty, starting with $, or holding / + # NUL


class TopicError(EdgefleetError, ValueError):
    """A topic that is not ``edgefleet/v1/<fleet>/<device>/<kind>``, or a name or kind that cannot be
    part of one."""


def topic_level_problem(value: str, *, wildcard: bool = False) -> str | None:
    """Why ``value`` cannot be one level of an edgefleet topic, or None when it can: it is empty, holds
    ``/``, ``+``, ``#`` or NUL, or starts with ``$``. ``wildcard``: ``+`` alone (a filter's any-level) is
    allowed too."""
    if wildcard and value == "+":
        return None
    if _NOT_A_LEVEL.search(value):
        return "must be one MQTT topic level (not empty, no / + # or NUL, not starting with $)"
    return None


def _check(what: str, value: str, *, wildcard: bool = False) -> None:
    problem = topic_level_problem(value, wildcard=wildcard)
    if problem is not None:
        raise TopicError(f"{what} {value!r} {problem}")


def device_topic(fleet: str, device: str, kind: str) -> str:
    """``edgefleet/v1/<fleet>/<device>/<kind>``, ``kind`` one of :data:`TOPIC_KINDS`; raises
    :class:`TopicError` for another kind or a name that is not one topic level."""
    if kind not in TOPIC_KINDS:
        raise TopicError(f"unknown topic kind {kind!r}: one of {', '.join(TOPIC_KINDS)}")
    _check("fleet", fleet)
    _check("device", device)
    return f"{TOPIC_ROOT}/{fleet}/{device}/{kind}"


def ack_topic(fleet: str, device: str) -> str:
    """``edgefleet/v1/<fleet>/<device>/ack``: the controllers' retained acknowledgement watermark."""
    _check("fleet", fleet)
    _check("device", device)
    return f"{TOPIC_ROOT}/{fleet}/{device}/{ACK_KIND}"


def topic_filters(
    *, fleet: str = "+", device: str = "+", kinds: Iterable[str] = TOPIC_KINDS, share_group: str | None = None
) -> list[str]:
    """One subscription filter per kind; ``fleet`` and ``device`` are a topic level or ``+`` (any).
    ``share_group``: the filters of that shared subscription (``$share/<group>/...``, every controller
    replica the same), so that each message goes to one subscriber of the group."""
    _check("fleet", fleet, wildcard=True)
    _check("device", device, wildcard=True)
    prefix = ""
    if share_group is not None:
        _check("share group", share_group)
        prefix = f"$share/{share_group}/"
    out = []
    for kind in kinds:
        if kind not in _ALL_KINDS:
            raise TopicError(f"unknown topic kind {kind!r}: one of {', '.join(TOPIC_KINDS)}, {ACK_KIND}")
        out.append(f"{prefix}{TOPIC_ROOT}/{fleet}/{device}/{kind}")
    return out


class AclTopics(NamedTuple):
    """The topics of one fleet's broker ACL, in Mosquitto's syntax (``%u``: the client's user name, which
    the broker takes from its certificate's common name; a device's is its id, one topic level)."""

    device_writes: tuple[str, ...]  # pattern write: a device's own status, telemetry and events
    device_reads: tuple[str, ...]  # pattern read: a device's own acknowledgements
    too_deep: str  # pattern deny: six levels or more, what %u makes of any other role's "<role>/<name>"
    fleet_reads: tuple[str, ...]  # topic read: every device's status, telemetry and events
    shared_reads: tuple[str, ...]  # topic read: the same through a shared subscription of any group
    ack_writes: tuple[str, ...]  # topic write: every device's acknowledgements


def acl_topics(fleet: str) -> AclTopics:
    """The topics :class:`AclTopics` describes for ``fleet`` (one topic level)."""
    fleet_reads = tuple(topic_filters(fleet=fleet))
    return AclTopics(
        device_writes=tuple(device_topic(fleet, "%u", kind) for kind in TOPIC_KINDS),
        device_reads=(ack_topic(fleet, "%u"),),
        too_deep=f"{TOPIC_ROOT}/+/+/+/+/#",
        fleet_reads=fleet_reads,
        shared_reads=tuple(f"$share/+/{t}" for t in fleet_reads),
        ack_writes=tuple(topic_filters(fleet=fleet, kinds=(ACK_KIND,))),
    )


def parse_topic(topic: str) -> tuple[str, str, str]:
    """``edgefleet/v1/<fleet>/<device>/<kind>`` -> ``(fleet, device, kind)``, ``kind`` one of
    :data:`TOPIC_KINDS` or ``ack``. The device must follow the name rule (``NAME_RE``: ``..``, ``MQ 1`` or a
    5000-character level are not devices), the fleet too with capitals allowed; anything else raises
    :class:`TopicError`."""
    parts = topic.split("/")
    if len(parts) != 5 or tuple(parts[:2]) != _ROOT or parts[4] not in _ALL_KINDS:
        raise TopicError(f"not an edgefleet topic ({TOPIC_ROOT}/<fleet>/<device>/<kind>): {topic[:200]!r}")
    if not _FLEET_RE.match(parts[2]):
        raise TopicError(f"fleet {parts[2][:80]!r} in {topic[:200]!r} is not a fleet id")
    if not NAME_RE.match(parts[3]):
        raise TopicError(f"device {parts[3][:80]!r} in {topic[:200]!r} is not a device id")
    return parts[2], parts[3], parts[4]
