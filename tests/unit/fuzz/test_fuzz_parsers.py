"""Property-based fuzzing of the parsers edgefleet owns: whatever the input, each either returns or raises
its package's documented error, never anything else. Short here (``EDGEFLEET_FUZZ_EXAMPLES``, default
25); ``tools/fuzz/run.py`` runs the same targets for a time budget."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgefleet.cloud._telemetry._validate import Rejected, parse_message
from edgefleet.edge._config import load_agent_config
from edgefleet.edge._errors import AgentConfigError
from edgefleet.proto.v1 import agent_pb2
from edgefleet.sdk import EdgefleetError, IntegrityError, check_archive
from edgefleet.sdk._manifest import parse_manifest
from edgefleet.sdk.kit import TopicError, parse_topic

EXAMPLES = int(os.environ.get("EDGEFLEET_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
yamlish = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
    max_leaves=20,
)
# agent.yaml around a valid skeleton, with random fields replaced or added
agent_docs = st.fixed_dictionaries(
    {"device_id": st.text(max_size=10) | st.just("cam-01"), "pipelines": yamlish},
    optional={
        "controller": yamlish | st.fixed_dictionaries({"tls": yamlish}),
        "labels": yamlish,
        "trusted_keys": yamlish,
        "revoked_keys": yamlish,
        "state_dir": yamlish,
        "telemetry": yamlish,
    },
)


@FUZZ
@given(doc=agent_docs | yamlish, raw=st.booleans(), text=st.text(max_size=200))
def test_agent_config_loader(tmp_path: Path, doc: Any, raw: bool, text: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text if raw else yaml.safe_dump(doc), encoding="utf-8")
    try:
        load_agent_config(path)
    except AgentConfigError as exc:
        assert str(path) in str(exc)


@FUZZ
@given(
    doc=yamlish
    | st.dictionaries(
        st.sampled_from(["name", "version", "task", "model", "files", "input", "output", "labels", "signature"]),
        yamlish,
    )
)
def test_manifest_parser(doc: Any) -> None:
    with contextlib.suppress(EdgefleetError):
        parse_manifest(doc, "fuzz")


members = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=30),
        st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]),
        st.binary(max_size=64),
        st.integers(min_value=0, max_value=1 << 40),
    ),
    max_size=6,
)


@FUZZ
@given(entries=members, garbage=st.binary(max_size=512), cut=st.integers(min_value=0, max_value=2048))
def test_archive_checker(tmp_path: Path, entries: list[Any], garbage: bytes, cut: int) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, declared in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = "target"
                tar.addfile(info)
            del declared
    blob = buf.getvalue()
    path = tmp_path / "a.tar"
    for candidate in (blob, blob[:cut], garbage, blob[:512] + garbage):
        path.write_bytes(candidate)
        try:
            total = check_archive(path)
        except IntegrityError:
            continue
        assert total >= 0


@FUZZ
@given(
    topic=st.text(max_size=60) | st.builds(lambda *p: "/".join(p), *[st.text(max_size=8)] * 5),
    payload=st.binary(max_size=300) | st.text(max_size=300).map(str.encode),
    ctype=st.none() | st.sampled_from(["application/json", "application/x-protobuf", "text/plain", ""]),
)
def test_mqtt_payload_decoder(topic: str, payload: bytes, ctype: str | None) -> None:
    with contextlib.suppress(TopicError):
        parse_topic(topic)
    with contextlib.suppress(Rejected):
        parse_message(topic, payload, ctype, 4096)


@FUZZ
@given(data=st.binary(max_size=400))
def test_protobuf_agent_messages(data: bytes) -> None:
    msg = agent_pb2.AgentMessage()
    try:
        msg.ParseFromString(data)
    except DecodeError:
        return
    msg.WhichOneof("body")  # the handlers' first question must always be answerable


@pytest.mark.skipif(EXAMPLES < 1, reason="fuzzing disabled")
def test_budget_is_small_in_ci() -> None:
    assert EXAMPLES <= 10_000
