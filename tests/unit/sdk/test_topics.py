"""The MQTT topic scheme, spelled once in the kit: what the agent publishes on, what the controller
subscribes to and parses, and what the broker ACL allows are the same topics."""

from __future__ import annotations

import pytest

from edgefleet.sdk import EdgefleetError
from edgefleet.sdk.kit import (
    ACK_KIND,
    TOPIC_KINDS,
    TopicError,
    ack_topic,
    acl_topics,
    device_topic,
    parse_topic,
    topic_filters,
    topic_level_problem,
)


@pytest.mark.parametrize("kind", TOPIC_KINDS)
def test_a_device_topic_parses_back_to_what_built_it(kind: str) -> None:
    topic = device_topic("plant-a", "cam-01", kind)
    assert topic == f"edgefleet/v1/plant-a/cam-01/{kind}"
    assert parse_topic(topic) == ("plant-a", "cam-01", kind)


def test_the_ack_topic_parses_back_and_is_no_device_kind() -> None:
    assert ack_topic("lab", "cam-1") == "edgefleet/v1/lab/cam-1/ack"
    assert parse_topic(ack_topic("lab", "cam-1")) == ("lab", "cam-1", ACK_KIND)
    with pytest.raises(TopicError, match="unknown topic kind 'ack'"):
        device_topic("lab", "cam-1", ACK_KIND)  # devices never publish their acknowledgements


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ("", "not an edgefleet topic"),
        ("edgefleet/v1/lab/cam-1", "not an edgefleet topic"),
        ("edgefleet/v1/lab/cam-1/telemetry/x", "not an edgefleet topic"),
        ("edgefleet/v2/lab/cam-1/telemetry", "not an edgefleet topic"),
        ("other/v1/lab/cam-1/telemetry", "not an edgefleet topic"),
        ("edgefleet/v1/lab/cam-1/nonsense", "not an edgefleet topic"),
        ("edgefleet/v1//cam-1/status", "fleet '' .* is not a fleet id"),
        ("edgefleet/v1/lab//status", "device '' .* is not a device id"),
        ("edgefleet/v1/lab/../telemetry", "device '..' .* is not a device id"),
        ("edgefleet/v1/lab/MQ 1/telemetry", "device 'MQ 1'"),
        ("edgefleet/v1/lab/Cam-1/telemetry", "device 'Cam-1'"),  # device ids are lower case
        (f"edgefleet/v1/lab/{'d' * 5000}/telemetry", "is not a device id"),
        ("edgefleet/v1/lab a/cam-1/telemetry", "fleet 'lab a'"),
        ("edgefleet/v1/\u212a/cam-1/telemetry", "is not a fleet id"),  # KELVIN SIGN: lower() makes it 'k'
    ],
)
def test_a_topic_outside_the_scheme_raises_one_clear_error(topic: str, message: str) -> None:
    with pytest.raises(TopicError, match=message) as info:
        parse_topic(topic)
    assert isinstance(info.value, EdgefleetError) and isinstance(info.value, ValueError)
    assert len(str(info.value)) < 400  # a 5000-character topic is cut in the message


def test_a_fleet_may_have_capitals_a_device_may_not() -> None:
    assert parse_topic("edgefleet/v1/Plant-A/cam-1/status") == ("Plant-A", "cam-1", "status")


@pytest.mark.parametrize("bad", ["", "a/b", "a+", "#", "x\0y", "$SYS"])
def test_names_that_are_not_one_topic_level_are_refused_by_every_builder(bad: str) -> None:
    assert topic_level_problem(bad) is not None
    for build in (
        lambda: device_topic(bad, "cam-1", "status"),
        lambda: device_topic("lab", bad, "status"),
        lambda: ack_topic(bad, "cam-1"),
        lambda: topic_filters(fleet=bad),
        lambda: topic_filters(share_group=bad),
        lambda: acl_topics(bad),
    ):
        with pytest.raises(TopicError, match="must be one MQTT topic level"):
            build()
    assert topic_level_problem("+") is not None and topic_level_problem("+", wildcard=True) is None


def test_the_ingest_and_tail_filters() -> None:
    assert topic_filters(share_group="edgefleet-ingest") == [
        "$share/edgefleet-ingest/edgefleet/v1/+/+/status",
        "$share/edgefleet-ingest/edgefleet/v1/+/+/telemetry",
        "$share/edgefleet-ingest/edgefleet/v1/+/+/events",
    ]
    assert topic_filters(fleet="lab", device="cam-1", kinds=("events",)) == ["edgefleet/v1/lab/cam-1/events"]
    with pytest.raises(TopicError, match="unknown topic kind 'nonsense'"):
        topic_filters(kinds=("nonsense",))
    with pytest.raises(TopicError, match="share group '\\+'"):
        topic_filters(share_group="+")  # not a subscription MQTT allows


def test_the_acl_topics_are_the_topics_devices_publish_on() -> None:
    acl = acl_topics("lab")
    assert acl.device_writes == tuple(device_topic("lab", "%u", k) for k in TOPIC_KINDS)
    assert acl.device_reads == (ack_topic("lab", "%u"),)
    assert acl.fleet_reads == tuple(topic_filters(fleet="lab"))
    assert acl.shared_reads == tuple(f"$share/+/{t}" for t in acl.fleet_reads)
    assert acl.ack_writes == ("edgefleet/v1/lab/+/ack",)
    assert acl.too_deep == "edgefleet/v1/+/+/+/+/#"  # what %u makes of a "<role>/<name>" user name


def test_agent_and_controller_speak_the_kits_scheme() -> None:
    from edgefleet.cloud._telemetry._validate import KINDS, Rejected, parse_message
    from edgefleet.edge._telemetry._messages import Identity, topic
    from edgefleet.edge._telemetry._messages import ack_topic as edge_ack_topic

    me = Identity("lab", "cam-1")
    assert [topic(me, k) for k in TOPIC_KINDS] == [device_topic("lab", "cam-1", k) for k in TOPIC_KINDS]
    assert edge_ack_topic(me) == ack_topic("lab", "cam-1")
    assert tuple(KINDS) == TOPIC_KINDS  # the controller has a message class for every kind, no more
    with pytest.raises(Rejected) as info:  # the kit parses it; the controller does not ingest its own acks
        parse_message(ack_topic("lab", "cam-1"), b"{}", None, 4096)
    assert info.value.reason == "topic"
    with pytest.raises(Rejected, match="device 'MQ 1'") as info:
        parse_message("edgefleet/v1/lab/MQ 1/telemetry", b"{}", None, 4096)
    assert info.value.reason == "topic"
