"""The agent's parts on real files: strict config, the content-addressed model store's refusals, the
persistent state, capability detection."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefleet.cloud import pack_package
from edgefleet.edge import AgentConfigError, ArtifactError, load_agent_config
from edgefleet.edge._agent import load_trusted_keys
from edgefleet.edge._caps import detect_capabilities
from edgefleet.edge._modelstore import ModelStore
from edgefleet.edge._state import AgentState
from edgefleet.sdk import generate_signing_key
from tests.support.onnx_models import yolo_package


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    generate_signing_key(tmp_path / "a.pem", tmp_path / "a.pub.pem")
    generate_signing_key(tmp_path / "b.pem", tmp_path / "b.pub.pem")
    return {"a": tmp_path / "a.pem", "a_pub": tmp_path / "a.pub.pem", "b": tmp_path / "b.pem"}


def make_store(tmp_path: Path, keys: dict[str, Path]) -> ModelStore:
    return ModelStore(tmp_path / "state", load_trusted_keys((keys["a_pub"],)))


def artifact(tmp_path: Path, key: Path | None, version: str = "2.0.0") -> tuple[Path, str, int]:
    pkg = yolo_package(tmp_path / f"pkg-{version}", version=version)
    return pack_package(pkg, tmp_path / f"art-{version}.tar", key=key)


def test_config_is_strict_and_errors_name_the_file_and_field(tmp_path: Path) -> None:
    good = {
        "device_id": "cam-01",
        "labels": {"site": "plant-a"},
        "trusted_keys": ["keys/pub.pem"],
        "state_dir": "state",
        "pipelines": {"entrance": {"model": "models/m", "sources": ["synthetic:"]}},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(good))
    cfg = load_agent_config(path)
    assert cfg.state_dir == tmp_path / "state"  # relative to the file
    assert cfg.trusted_keys == (tmp_path / "keys/pub.pem",)
    assert cfg.pipelines["entrance"].model == tmp_path / "models/m"
    # sources and sinks too (they were relative to the working directory, / under systemd)
    (tmp_path / "clips").mkdir()
    pipe = {"model": "models/m", "sources": ["lobby=clips/a.mp4?realtime=1", "rtsp://h/x", "synthetic:"],
            "sinks": [{"type": "jsonl", "path": "out/r.jsonl"}]}  # fmt: skip
    path.write_text(yaml.safe_dump({**good, "pipelines": {"entrance": pipe}}))
    cfg = load_agent_config(path)
    assert cfg.pipelines["entrance"].sources == (f"lobby={tmp_path}/clips/a.mp4?realtime=1", "rtsp://h/x", "synthetic:")
    assert cfg.pipelines["entrance"].sinks[0].path == tmp_path / "out/r.jsonl"
    for field, value, needle in (
        ("device_id", "Cam 01", "device_id"),
        ("labels", {"site": "a b"}, "labels"),
        ("typo", 1, "typo"),
        ("controller", {"address": "not an address"}, "controller.address"),
        ("controller", {"address": "127.0.0.1:99999"}, "controller.address"),
        ("health_window_s", float("inf"), "health_window_s"),  # the agent's timer thread died on it
        ("download_rate_limit_kbps", float("nan"), "download_rate_limit_kbps"),
        ("install_nice", 20, "install_nice"),
        ("controller", {"backoff_initial_s": 100, "backoff_max_s": 10}, "exceeds backoff_max_s"),
        ("state_dir", "", "state_dir is empty"),
    ):
        path.write_text(yaml.safe_dump({**good, field: value}))
        with pytest.raises(AgentConfigError) as exc:
            load_agent_config(path)
        assert str(path) in str(exc.value) and needle in str(exc.value)
    with pytest.raises(AgentConfigError, match="no such config file"):
        load_agent_config(tmp_path / "missing.yaml")
    path.write_bytes(bytes(range(128, 256)))
    with pytest.raises(AgentConfigError, match="not a YAML file"):
        load_agent_config(path)


def test_store_installs_a_signed_artifact(tmp_path: Path, keys: dict[str, Path]) -> None:
    store = make_store(tmp_path, keys)
    path, sha, size = artifact(tmp_path, keys["a"])
    pkg = store.install(path, sha, size)
    assert pkg.ref == "toy-yolo:2.0.0" and pkg.signed_by
    assert store.installed(sha) == pkg.root
    assert pkg.root.is_relative_to(store.models / sha)
    assert list(store.staging.iterdir()) == []


def _tamper_manifest(src: Path, dst: Path) -> None:
    """Change the (signed) manifest inside the tar and keep everything else: a re-hashed forgery."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()  # type: ignore[union-attr]
            if m.name.endswith("manifest.yaml"):
                doc = yaml.safe_load(data)
                doc["description"] = "tampered"
                data = yaml.safe_dump(doc).encode()
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data))


@pytest.mark.parametrize("case", ["corrupt", "truncated", "unsigned", "untrusted", "tampered"])
def test_store_refuses_bad_artifacts_and_stays_unchanged(tmp_path: Path, keys: dict[str, Path], case: str) -> None:
    store = make_store(tmp_path, keys)
    key = {"unsigned": None, "untrusted": keys["b"]}.get(case, keys["a"])
    path, sha, size = artifact(tmp_path, key)
    data = bytearray(path.read_bytes())
    if case == "corrupt":
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif case == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif case == "tampered":
        forged = tmp_path / "forged.tar"
        _tamper_manifest(path, forged)
        path, sha, size = forged, hashlib.sha256(forged.read_bytes()).hexdigest(), forged.stat().st_size
    expected = {
        "corrupt": "corrupt",
        "truncated": "truncated",
        "unsigned": "not signed",
        "untrusted": "not trusted",
        "tampered": "does not verify",
    }[case]
    with pytest.raises(ArtifactError, match=expected):
        store.install(path, sha, size)
    assert list(store.models.iterdir()) == []
    assert list(store.staging.iterdir()) == []


def test_a_kill_between_install_and_part_removal_leaves_nothing_behind(tmp_path: Path, keys: dict[str, Path]) -> None:
    """Found by the random-kill run: a kill after the install, before ``downloads/<sha>.part`` was removed,
    left the complete download (7.6 MB) behind for good: on restart the version was found installed and
    the clean-up skipped. A start-up now removes what a kill can leave; an unfinished download stays."""
    store = make_store(tmp_path, keys)
    path, sha, size = artifact(tmp_path, keys["a"])
    part = store.partial(sha)
    shutil.copyfile(path, part)
    store.install(part, sha, size)  # ... SIGKILL here
    unfinished = store.partial("f" * 64)
    unfinished.write_bytes(b"the first bytes of another artifact")
    (store.staging / "0123456789ab-xyz").mkdir()  # mid-unpack
    state = tmp_path / "state" / "state.json"
    AgentState(state).save()
    (state.parent / ".state-abc123").write_text('{"serving": ')  # mid-write of state.json
    ModelStore(tmp_path / "state", load_trusted_keys((keys["a_pub"],)))  # the agent starts again
    AgentState(state)
    assert not part.exists()
    assert unfinished.exists()  # resumed when its command comes again
    assert list(store.staging.iterdir()) == []
    assert sorted(p.name for p in state.parent.iterdir() if p.name.startswith(".state-")) == []
    assert store.installed(sha) is not None


def test_a_hosted_pipeline_without_a_result_listener_keeps_running(tmp_path: Path) -> None:
    """Found by `make demo` after the sinks moved to the seam: without a result listener (no detection
    events) the host's pipeline queued every result for an iterator nobody read; it stopped after 256."""
    import time

    from edgefleet.edge._pipeline_host import PipelineHost
    from edgefleet.sdk import PipelineConfig, load_package

    pkg = load_package(yolo_package(tmp_path / "pkg"))
    config = PipelineConfig(model=pkg.root, sources=("synthetic:?width=64&height=48&fps=400&live=false",))
    host = PipelineHost("cam", config)  # no listener
    host.start(pkg)
    try:
        deadline = time.monotonic() + 30
        while host.status()["health"].get("results", 0) < 600 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert host.status()["health"]["results"] >= 600, host.status()
    finally:
        host.close()


def test_an_sdk_rollback_in_the_window_points_the_host_back_at_the_old_package(tmp_path: Path) -> None:
    """Read in the code: after the SDK rolled a version back in its health window the host still held the
    rejected package, so a watchdog restart would have started the pipeline on it."""
    import time

    from edgefleet.edge._pipeline_host import PipelineHost
    from edgefleet.sdk import PipelineConfig, load_package

    good = load_package(yolo_package(tmp_path / "good"))
    flaky = load_package(yolo_package(tmp_path / "flaky", version="2.0.0", nan_above=0.75))  # NaN on white frames
    config = PipelineConfig(
        model=good.root, sources=("synthetic:?width=96&height=96&fps=30&white_after=30&live=false",)
    )
    host = PipelineHost("cam", config)
    host.start(good)
    try:
        out = host.swap(flaky, 30.0, lambda _s, _m: None)
        assert out.ok and host.ref == "toy-yolo:2.0.0"
        deadline = time.monotonic() + 20
        while host.ref != "toy-yolo:1.0.0" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.ref == "toy-yolo:1.0.0", "the SDK did not roll back"
        while host.package is flaky and time.monotonic() < deadline:  # within a status report or 0.5 s
            host.status()
            time.sleep(0.05)
        assert host.package is not None and host.package.ref == "toy-yolo:1.0.0"
        assert host.status()["previous_ref"] == ""
        p = host.pipeline
        assert p is not None
        p._flow.fail("sinks", RuntimeError("disk full"))  # the pipeline fails: the watchdog restarts it
        while host.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host.restarts >= 1 and host.pipeline is not p
        assert host.pipeline is not None and host.pipeline.model.ref == "toy-yolo:1.0.0"
    finally:
        host.close()


def test_install_work_runs_on_one_thread_below_the_pipelines_priority() -> None:
    """The download/verify/install thread is niced (Linux sets it per thread), the caller's is not."""
    import os
    import sys
    import threading

    from edgefleet.edge._background import background_executor

    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread nice values are a Linux feature")
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    pool = background_executor(10)
    try:
        tid, nice = pool.submit(lambda: (threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0))).result(10)
        again = pool.submit(threading.get_native_id).result(10)
    finally:
        pool.shutdown()
    assert nice == min(19, mine + 10) and again == tid  # one thread, reused
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_install_work_is_bounded_by_default() -> None:
    from edgefleet.edge._config import AgentConfig

    cfg = AgentConfig.model_validate({"device_id": "d", "pipelines": {"p": {"model": "m", "sources": ["synthetic:"]}}})
    assert cfg.download_rate_limit_kbps == 80_000.0  # 10 MB/s unless configured
    assert cfg.install_nice == 10


def test_state_survives_a_restart_and_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    st = AgentState(path)
    st.serving["cam"] = {"ref": "m:2.0.0", "sha256": "ab", "path": "/x"}
    st.record_command("c1", True, "serving m:2.0.0", "m:2.0.0")
    again = AgentState(path)
    assert again.serving["cam"]["ref"] == "m:2.0.0"
    assert again.commands["c1"]["ok"] is True
    assert not list(tmp_path.glob(".state-*"))  # no temporary files left
    path.write_text("{not json")
    fresh = AgentState(path)
    assert fresh.serving == {} and (tmp_path / "state.corrupt").exists()
    # valid JSON of another shape crashed every start with a traceback
    for other in ("[]", '{"serving": []}', '{"serving": {"cam": "x"}}', '{"serving": {"cam": {"path": 5}}}',
                  '{"commands": 5}'):  # fmt: skip
        path.write_text(other)
        assert AgentState(path).serving == {} and not path.exists()


def test_capabilities_are_detected_cheaply() -> None:
    caps: dict[str, Any] = detect_capabilities("0.1.0")
    assert caps["arch"] and caps["os"] == "Linux" and caps["cpu_count"] >= 1
    assert "CPUExecutionProvider" in caps["ort_providers"]
    json.dumps(caps)  # fits the Capabilities message (plain values)


def test_agent_cli_reports_a_bad_config_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump({"device_id": "cam-01", "pipelines": {}}))
    edgefleet = str(Path(sys.executable).with_name("edgefleet"))
    out = subprocess.run(
        [edgefleet, "agent", "--config", str(cfg)], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "pipelines" in out.stderr and str(cfg) in out.stderr.replace("\n", "")


def test_one_agent_per_state_dir(tmp_path: Path) -> None:
    """Two agents on one state_dir shared its store and state, and the controller flipped between them."""
    import os

    from edgefleet.edge._errors import AgentError
    from edgefleet.edge._main import _state_dir_lock

    with _state_dir_lock(tmp_path / "state"):
        assert (tmp_path / "state" / "agent.lock").read_text().strip() == str(os.getpid())
        busy = pytest.raises(AgentError, match=f"in use by another agent \\(pid {os.getpid()}\\)")
        with busy, _state_dir_lock(tmp_path / "state"):
            pass
    with _state_dir_lock(tmp_path / "state"):  # released with the first agent
        pass


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_pipeline_that_fails_is_restarted_on_its_version(tmp_path: Path) -> None:
    """A pipeline whose sink hit a full disk stayed dead while the agent ran on; it is restarted now."""
    import time

    from edgefleet.edge._pipeline_host import PipelineHost
    from edgefleet.sdk import PipelineConfig, load_package

    pkg = load_package(yolo_package(tmp_path / "pkg"))
    config = PipelineConfig(
        model=pkg.root,
        sources=("synthetic:?width=64&height=48&fps=500&live=false",),
        sinks=({"type": "jsonl", "path": "/dev/full"},),  # type: ignore[arg-type]
    )
    host = PipelineHost("cam", config)
    host.start(pkg)
    try:
        first = host.pipeline
        deadline = time.monotonic() + 20
        while host.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert host.restarts >= 1, "the failed pipeline was not restarted"
        assert host.pipeline is not first and host.ref == pkg.ref
    finally:
        host.close()
    assert host._watchdog is not None and not host._watchdog.is_alive()


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("closed-port", "connection refused (nothing listens on 127.0.0.1 port"),
        ("nonexistent.invalid:50051", "the name 'nonexistent.invalid' does not resolve"),
        ("not-grpc", "no answer within 2 s: the address takes connections but no gRPC session came up"),
    ],
)
def test_an_unreachable_controller_is_logged_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, target: str, why: str
) -> None:
    """The agent logged "no answer within 10 s" for a wrong port and a wrong host name alike, after the full
    connect timeout; a refused port or a name that does not resolve is now said at once."""
    import asyncio
    import logging
    import socket
    import time

    from edgefleet.edge._agent import Agent
    from edgefleet.edge._config import AgentConfig

    listener = socket.socket()  # bound: "closed-port" closes it, "not-grpc" listens and never answers
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if target == "not-grpc":
        listener.listen(8)
    else:
        listener.close()
    address = f"127.0.0.1:{port}" if target in ("closed-port", "not-grpc") else target
    config = AgentConfig.model_validate(
        {
            "device_id": "cam-01",
            "require_signature": False,
            "state_dir": str(tmp_path / "state"),
            "controller": {"address": address, "connect_timeout_s": 2.0, "backoff_initial_s": 0.2},
            "pipelines": {"p": {"model": str(tmp_path / "m"), "sources": ["synthetic:"]}},
        }
    )

    async def first_warning() -> tuple[str, float]:
        agent, stop = Agent(config), asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        started = time.monotonic()
        try:
            while time.monotonic() - started < 8:
                said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"controller {address}")]
                if said:
                    return said[0], time.monotonic() - started
                await asyncio.sleep(0.02)
            return "", time.monotonic() - started
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    try:
        with caplog.at_level(logging.WARNING, logger="edgefleet.edge._agent"):
            message, seconds = asyncio.run(first_warning())
    finally:
        listener.close()
    assert why in message, message
    if target != "not-grpc":
        assert seconds < 1.5, f"{seconds:.1f} s: waited for the connect timeout (2 s) to say it"


def test_a_hung_connect_probe_does_not_hold_up_the_agents_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's name lookup has no timeout of its own. On the event loop's executor, ``asyncio.run``
    waited for it at exit, so an agent told to stop while DNS hung stayed up until the lookup gave up."""
    import asyncio
    import time

    from edgefleet.edge import _channel_ready

    def hung(address: str, timeout_s: float) -> str | None:
        time.sleep(6)  # a resolver that does not answer
        return None

    monkeypatch.setattr(_channel_ready, "connect_problem", hung)
    started = time.monotonic()
    assert asyncio.run(_channel_ready.probe_connect("cam.example:50051", 0.5)) == ""
    assert time.monotonic() - started < 3, "the agent's exit waited for the hung probe"


def test_status_reports_go_on_after_one_fails(tmp_path: Path) -> None:
    """Found by a loaded full run: one status report that raised (a stream added while it was taken) ended
    the agent's report task for the rest of the connection; the controller saw a connected device fall
    silent. A report that fails is logged and the next one is taken an interval later."""
    import asyncio

    from edgefleet.edge._agent import Agent
    from edgefleet.edge._config import AgentConfig

    agent = Agent(
        AgentConfig(
            device_id="d1",
            state_dir=tmp_path / "state",
            require_signature=False,
            pipelines={"cam": {"model": tmp_path / "m", "sources": ["synthetic:"]}},
        )
    )
    calls = 0

    def statuses() -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("dictionary changed size during iteration")
        return []

    agent.pipeline_statuses = statuses  # type: ignore[method-assign]
    agent.status_interval_s = 0.01

    async def run() -> int:
        out: asyncio.Queue[Any] = asyncio.Queue()
        agent._out = out
        task = asyncio.create_task(agent._report_status(None))
        for _ in range(500):
            await asyncio.sleep(0.01)
            if out.qsize() >= 5 or task.done():
                break
        task.cancel()
        return out.qsize()

    assert asyncio.run(run()) >= 5, "the report task ended at the failed report"
