"""The control plane end to end: a real controller process, real agent processes running real pipelines
on synthetic cameras, on loopback; SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgefleet.cloud import FleetClient
from edgefleet.sdk import generate_signing_key
from tests.conftest import FAILED
from tests.support.onnx_models import yolo_package

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EDGEFLEET = str(Path(sys.executable).with_name("edgefleet"))
PG_DSN = "postgresql://postgres@127.0.0.1:5432/"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as exc:  # the controller may be restarting
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class Proc:
    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.p: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        f = self.log.open("ab")
        self.p = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        f.close()
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.p = None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    generate_signing_key(d / "a.pem", d / "a.pub.pem")
    generate_signing_key(d / "b.pem", d / "b.pub.pem")
    return {"a": d / "a.pem", "a_pub": d / "a.pub.pem", "b": d / "b.pem", "b_pub": d / "b.pub.pem"}


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pkgs")
    out = {v: yolo_package(d / v, version=v) for v in ("1.0.0", "2.0.0", "3.0.0", "4.0.0", "5.0.0")}
    big = d / "6.0.0"
    big.mkdir()
    (big / "padding.bin").write_bytes(os.urandom(1_500_000))
    out["6.0.0"] = yolo_package(big, version="6.0.0")
    out["7.0.0"] = yolo_package(d / "7.0.0", version="7.0.0", nan=True)  # outputs NaN: fails the gate
    return out


@contextlib.contextmanager
def postgres_db() -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    name = f"edgefleet_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG_DSN + "postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_DSN + name
    finally:
        with psycopg.connect(PG_DSN + "postgres", autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/controller.db"
    else:
        with postgres_db() as url:
            yield url


class Fleet:
    """A controller and agents on loopback, torn down in reverse."""

    def __init__(self, root: Path, keys: dict[str, Path], db_url: str) -> None:
        self.root, self.keys, self.db_url = root, keys, db_url
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.controller: Proc | None = None
        self.agents: dict[str, Proc] = {}
        self.client = FleetClient(self.address, timeout_s=10)

    def start_controller(self, *extra: str) -> None:
        args = [
            EDGEFLEET,
            "controller",
            "serve",
            "--db",
            self.db_url,
            "--listen",
            self.address,
            "--data-dir",
            str(self.root / "controller"),
            "--insecure",
            "--trusted-key",
            str(self.keys["a_pub"]),
            "--trusted-key",
            str(self.keys["b_pub"]),
            "--status-interval",
            "0.5",
            "--health-window",
            "1",
            "--tick",
            "0.2",
            "--lease",
            "3",
            "--stale",
            "5",
            *extra,
        ]
        self.controller = Proc(args, self.root / "controller.log").start()
        wait_for("the controller", lambda: self.client.list_models() is not None, 30)

    def agent_config(self, device_id: str, labels: dict[str, str], model: Path, **extra: Any) -> Path:
        cfg = {
            "device_id": device_id,
            "labels": labels,
            "controller": {"address": self.address, "backoff_initial_s": 0.2, "backoff_max_s": 1.0},
            "trusted_keys": [str(self.keys["a_pub"])],
            "state_dir": str(self.root / device_id),
            "pipelines": {
                "cam": {"model": str(model), "sources": ["synthetic:?width=160&height=120&fps=10"]},
            },
            **extra,
        }
        path = self.root / f"{device_id}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def start_agent(self, device_id: str, labels: dict[str, str], model: Path, **extra: Any) -> Proc:
        cfg = self.agent_config(device_id, labels, model, **extra)
        proc = Proc([EDGEFLEET, "agent", "--config", str(cfg)], self.root / f"{device_id}.log").start()
        self.agents[device_id] = proc
        return proc

    def device(self, device_id: str) -> Any:
        return self.client.get_device(device_id)

    def serving(self, device_id: str) -> set[str]:
        return {p.model_ref for p in self.device(device_id).pipelines}

    def wait_online(self, *ids: str, timeout: float = 40) -> None:
        for i in ids:
            wait_for(f"{i} online", lambda i=i: self.device(i).online and self.device(i).pipelines, timeout)

    def wait_rollout(self, rid: str, states: tuple[str, ...], timeout: float = 40) -> Any:
        return wait_for(f"rollout in {states}", lambda: (r := self.client.rollout(rid)).state in states and r, timeout)

    def log_tails(self) -> str:
        procs = {"controller": self.controller, **self.agents}
        return "\n".join(_tail(name, p.text()) for name, p in procs.items() if p is not None)

    def close(self) -> None:
        for a in self.agents.values():
            a.kill(signal.SIGTERM)
        if self.controller is not None:
            self.controller.kill(signal.SIGTERM)
        self.client.close()


@pytest.fixture
def fleet_factory(
    tmp_path: Path, keys: dict[str, Path], request: pytest.FixtureRequest
) -> Iterator[Callable[[str], Fleet]]:
    made: list[Fleet] = []

    def make(db_url: str) -> Fleet:
        f = Fleet(tmp_path, keys, db_url)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()
    if request.node.stash.get(FAILED, False):
        for f in made:
            print(f.log_tails())  # the controller's and the agents' last words, beside the failure


#: the log lines worth showing beside a failure: the rollouts' and commands' steps, and what went wrong
_TELLING = re.compile(r"WARNING|ERROR|Traceback|rollout|command|STEP_|stream .* (added|removed)|connected|stale")


def _tail(name: str, text: str, lines: int = 40) -> str:
    telling = [line for line in text.splitlines() if _TELLING.search(line)]
    return f"--- {name} (last {min(lines, len(telling))} of {len(telling)} telling lines) ---\n" + "\n".join(
        telling[-lines:]
    )


def _agent_swaps(fleet: Fleet, device_id: str, ref: str) -> int:
    return sum(1 for line in fleet.agents[device_id].text().splitlines() if "STEP_CUTOVER" in line and ref in line)


def test_wave_rollout_survives_offline_agent_and_controller_kill(
    db_url: str, fleet_factory: Callable[[str], Fleet], keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    fleet = fleet_factory(db_url)
    fleet.start_controller()
    v1, v2 = packages["1.0.0"], packages["2.0.0"]
    site = {"site": "plant-a"}
    for i in ("a1", "a2", "a3"):
        fleet.start_agent(i, site, v1)
    fleet.start_agent("b1", {"site": "plant-b"}, v1)
    fleet.wait_online("a1", "a2", "a3", "b1")
    assert fleet.serving("a1") == {"toy-yolo:1.0.0"}
    # a3 goes offline before the rollout starts
    fleet.agents["a3"].kill(signal.SIGTERM)
    wait_for("a3 offline", lambda: not fleet.device("a3").online, 15)

    pushed = fleet.client.push(v2, key=keys["a"])
    assert pushed.created and pushed.model.signed_by
    ro = fleet.client.deploy("toy-yolo:2.0.0", site, ["1", "100%"], health_window_s=1.5)
    assert [m.wave for m in ro.devices] == [0, 1, 1]
    assert ro.devices[0].device_id in {"a1", "a2"}  # an online device goes first
    first = ro.devices[0].device_id

    # kill the controller once wave 1 succeeded, before wave 2 has finished
    wait_for("wave 1 done", lambda: fleet.client.rollout(ro.rollout_id).current_wave == 1, 40, 0.05)
    assert fleet.controller is not None
    fleet.controller.kill(signal.SIGKILL)
    fleet.start_controller()
    done = fleet.wait_rollout(ro.rollout_id, ("completed",), 60)
    states = {m.device_id: m.state for m in done.devices}
    assert states["a1"] == states["a2"] == "succeeded", done
    assert states["a3"] in ("applying", "pending"), done  # offline: converges later
    assert fleet.serving("a1") == fleet.serving("a2") == {"toy-yolo:2.0.0"}
    assert fleet.serving("b1") == {"toy-yolo:1.0.0"}  # not selected
    assert _agent_swaps(fleet, first, "toy-yolo:2.0.0") == 1  # the restart did not redo it

    # a3 comes back and converges to the desired state
    fleet.start_agent("a3", site, v1)
    wait_for("a3 on v2", lambda: fleet.serving("a3") == {"toy-yolo:2.0.0"}, 40)
    wait_for(
        "a3 succeeded",
        lambda: {m.device_id: m.state for m in fleet.client.rollout(ro.rollout_id).devices}["a3"] == "succeeded",
        30,
    )

    # devices that match the selector only now follow the completed rollout: a brand-new agent, and b1
    # once an operator gives it the label
    fleet.start_agent("a4", site, v1)
    fleet.client.set_labels("b1", site, [])
    for late in ("a4", "b1"):
        wait_for(f"{late} on v2", lambda late=late: fleet.serving(late) == {"toy-yolo:2.0.0"}, 40)
        wait_for(f"{late} succeeded", lambda late=late: _member(fleet, ro.rollout_id, late).state == "succeeded", 30)
    assert fleet.client.rollout(ro.rollout_id).state == "completed"

    # a replayed command (same id) is answered from the agent's record and changes nothing
    a1_cmd = next(d for d in fleet.device("a1").desired if d.model_name == "toy-yolo").command_id
    _replay(db_url, a1_cmd)
    wait_for("replay answered", lambda: "(duplicate)" in fleet.device("a1").last_event, 20)
    assert _agent_swaps(fleet, "a1", "toy-yolo:2.0.0") == 1
    assert fleet.serving("a1") == {"toy-yolo:2.0.0"}

    # the agent restarts on its last-good version
    fleet.agents["a1"].kill(signal.SIGKILL)
    fleet.start_agent("a1", site, v1)
    wait_for("a1 back on v2", lambda: fleet.device("a1").online and fleet.serving("a1") == {"toy-yolo:2.0.0"}, 40)


def _replay(db_url: str, command_id: str) -> None:
    import sqlalchemy as sa

    url = db_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as c:
            c.execute(sa.text("UPDATE desired SET state='pending' WHERE command_id=:c"), {"c": command_id})
    finally:
        engine.dispose()


def _member(fleet: Fleet, rid: str, device_id: str) -> Any:
    return next(m for m in fleet.client.rollout(rid).devices if m.device_id == device_id)


def test_bad_artifacts_are_refused_and_the_old_version_keeps_serving(
    fleet_factory: Callable[[str], Fleet], tmp_path: Path, keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    fleet = fleet_factory(f"sqlite:///{tmp_path}/controller.db")
    fleet.start_controller("--allow-unsigned")
    fleet.start_agent("a1", {"site": "x"}, packages["1.0.0"])
    fleet.wait_online("a1")
    store = tmp_path / "controller" / "artifacts"

    def corrupt(sha: str) -> None:
        blob = store / sha[:2] / sha
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))

    def truncate(sha: str) -> None:
        blob = store / sha[:2] / sha
        blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])

    cases: list[tuple[str, Path | None, Callable[[str], None] | None, str]] = [
        ("2.0.0", keys["b"], None, "not trusted"),  # signed, but by a key the agent does not trust
        ("3.0.0", keys["a"], corrupt, "corrupt"),
        ("4.0.0", keys["a"], truncate, "truncated"),
        ("5.0.0", None, None, "not signed"),
        ("7.0.0", keys["a"], None, "refused at"),  # verified and loaded, but its outputs fail the gate
    ]
    shas = {}
    for version, key, damage, why in cases:
        pushed = fleet.client.push(packages[version], key=key)
        shas[version] = pushed.model.sha256
        if damage is not None:
            damage(pushed.model.sha256)
        ro = fleet.client.deploy(f"toy-yolo:{version}", {"site": "x"}, ["100%"], health_window_s=1)
        done = fleet.wait_rollout(ro.rollout_id, ("aborted",), 30)
        assert why in done.devices[0].message, (version, done.devices[0].message)
        assert done.devices[0].state == "failed"
        assert fleet.serving("a1") == {"toy-yolo:1.0.0"}
        status = fleet.device("a1").pipelines[0]
        assert status.state == "running" and status.health.healthy
    # pushing the same package again repairs the damaged copy, and it deploys
    fleet.client.push(packages["3.0.0"], key=keys["a"])
    ro = fleet.client.deploy("toy-yolo:3.0.0", {"site": "x"}, ["100%"], health_window_s=1)
    assert fleet.wait_rollout(ro.rollout_id, ("completed",), 30).devices[0].state == "succeeded"
    assert fleet.serving("a1") == {"toy-yolo:3.0.0"}
    # only the packages that verified (and failed later, at the gate) reached the agent's model store
    assert sorted(p.name for p in (tmp_path / "a1" / "models").iterdir()) == sorted([shas["7.0.0"], shas["3.0.0"]])
    assert list((tmp_path / "a1" / "downloads").iterdir()) == []


def test_agent_killed_mid_download_restarts_on_last_good_and_resumes(
    fleet_factory: Callable[[str], Fleet], tmp_path: Path, keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    fleet = fleet_factory(f"sqlite:///{tmp_path}/controller.db")
    fleet.start_controller()
    slow = {"download_rate_limit_kbps": 4000}  # 500 kB/s
    fleet.start_agent("a1", {"site": "x"}, packages["1.0.0"], **slow)
    fleet.wait_online("a1")
    pushed = fleet.client.push(packages["6.0.0"], key=keys["a"])
    assert pushed.model.size > 1_500_000
    ro = fleet.client.deploy("toy-yolo:6.0.0", {"site": "x"}, ["100%"], health_window_s=1)
    part = tmp_path / "a1" / "downloads" / f"{pushed.model.sha256}.part"
    wait_for("download under way", lambda: part.exists() and part.stat().st_size > 200_000, 20, 0.05)
    fleet.agents["a1"].kill(signal.SIGKILL)
    held = part.stat().st_size
    assert 0 < held < pushed.model.size

    restarted = fleet.start_agent("a1", {"site": "x"}, packages["1.0.0"], **slow)
    wait_for("a1 back", lambda: fleet.device("a1").online, 30)
    assert "serving toy-yolo:1.0.0" in restarted.text()  # last-good, not the half-downloaded version
    done = fleet.wait_rollout(ro.rollout_id, ("completed",), 40)
    assert done.devices[0].state == "succeeded", done
    assert fleet.serving("a1") == {"toy-yolo:6.0.0"}
    resumed = [line for line in restarted.text().splitlines() if "resuming at" in line]
    assert resumed, restarted.text()[-2000:]
    offset = int(resumed[0].split("resuming at ")[1].split()[0])
    assert offset >= held // 2
    state = json.loads((tmp_path / "a1" / "state.json").read_text())
    wait_for(
        "v6 last-good",
        lambda: json.loads((tmp_path / "a1" / "state.json").read_text())["serving"]["cam"]["ref"] == "toy-yolo:6.0.0",
        10,
    )
    assert state["commands"][f"{ro.rollout_id}.a1.apply"]["ok"] is True

    # the operator rolls the rollout back: the device returns to the version it served before
    back = fleet.client.control(ro.rollout_id, "rollback")
    assert back.state == "rolled_back"
    wait_for("a1 back on v1", lambda: fleet.serving("a1") == {"toy-yolo:1.0.0"}, 30)
    wait_for("member rolled back", lambda: _member(fleet, ro.rollout_id, "a1").state == "rolled_back", 20)


def test_a_device_that_crashes_in_its_window_and_returns_after_it_converges(
    fleet_factory: Callable[[str], Fleet], tmp_path: Path, keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    """SIGKILL inside the health window, back only after the controller's window has run out: the member
    must not succeed on the reports sent before the crash; the agent restarts on its last-good, the
    controller re-sends and the device converges (serving the version and holding it as last-good)."""
    fleet = fleet_factory(f"sqlite:///{tmp_path}/controller.db")
    # expected back for 30 s (not the suite's 5): on a loaded machine the restarted agent takes longer than
    # 5 s to report, and the rollout would rightly complete without it
    fleet.start_controller("--stale", "30")
    fleet.start_agent("a1", {"site": "x"}, packages["1.0.0"])
    fleet.wait_online("a1")
    fleet.client.push(packages["2.0.0"], key=keys["a"])
    ro = fleet.client.deploy("toy-yolo:2.0.0", {"site": "x"}, ["100%"], health_window_s=2)
    wait_for("cut over", lambda: fleet.serving("a1") == {"toy-yolo:2.0.0"}, 30, 0.05)
    swapped = time.monotonic()
    time.sleep(0.6)  # a status report or two on the new version reach the controller
    fleet.agents["a1"].kill(signal.SIGKILL)  # before 2.0.0 has proven itself
    time.sleep(max(0.0, swapped + 2 + 2.0 - time.monotonic()))  # the controller's window is over
    m = _member(fleet, ro.rollout_id, "a1")
    assert m.state != "succeeded", m
    assert fleet.client.rollout(ro.rollout_id).state == "running"
    state = json.loads((tmp_path / "a1" / "state.json").read_text())
    assert state["serving"].get("cam", {}).get("ref", "toy-yolo:1.0.0") == "toy-yolo:1.0.0"

    restarted = fleet.start_agent("a1", {"site": "x"}, packages["1.0.0"])
    wait_for("a1 back on its last-good", lambda: "serving toy-yolo:1.0.0" in restarted.text(), 30, 0.1)
    done = fleet.wait_rollout(ro.rollout_id, ("completed", "aborted"), 60)
    assert done.state == "completed" and done.devices[0].state == "succeeded", done
    assert done.devices[0].command_id == f"{ro.rollout_id}.a1.apply.2"  # re-sent once, by the controller
    assert fleet.serving("a1") == {"toy-yolo:2.0.0"}
    state = json.loads((tmp_path / "a1" / "state.json").read_text())
    assert state["serving"]["cam"]["ref"] == "toy-yolo:2.0.0"  # last-good on the device itself
    wait_for("the report naming it", lambda: fleet.device("a1").pipelines[0].last_good_ref == "toy-yolo:2.0.0", 10)


def test_two_replicas_share_one_postgresql(
    fleet_factory: Callable[[str], Fleet], keys: dict[str, Path], packages: dict[str, Path]
) -> None:
    with postgres_db() as url:
        one, two = fleet_factory(url), fleet_factory(url)
        # expected back for 30 s (see the crash test above): the restart below must not race the stale limit
        one.start_controller("--replica-id", "one", "--stale", "30")
        two.start_controller("--replica-id", "two", "--stale", "30")
        one.start_agent("a1", {"site": "x"}, packages["1.0.0"])  # connected to replica one
        one.wait_online("a1")
        assert two.device("a1").online  # the other replica sees it through the database
        two.client.push(packages["2.0.0"], key=keys["a"])
        ro = two.client.deploy("toy-yolo:2.0.0", {"site": "x"}, ["100%"], health_window_s=1)
        done = one.wait_rollout(ro.rollout_id, ("completed",), 40)
        assert done.devices[0].state == "succeeded"
        assert one.serving("a1") == {"toy-yolo:2.0.0"}
        # killed inside the next rollout's window, the agent comes back through the other replica: one
        # re-send between them (decided under the rollout's lease), and it converges
        two.client.push(packages["3.0.0"], key=keys["a"])
        ro = one.client.deploy("toy-yolo:3.0.0", {"site": "x"}, ["100%"], health_window_s=2)
        wait_for("cut over", lambda: one.serving("a1") == {"toy-yolo:3.0.0"}, 30, 0.05)
        one.agents["a1"].kill(signal.SIGKILL)
        time.sleep(3.0)
        assert _member(one, ro.rollout_id, "a1").state != "succeeded"
        two.start_agent("a1", {"site": "x"}, packages["1.0.0"])  # its config now names replica two
        done = two.wait_rollout(ro.rollout_id, ("completed", "aborted"), 60)
        assert done.state == "completed" and done.devices[0].state == "succeeded", done
        assert done.devices[0].command_id == f"{ro.rollout_id}.a1.apply.2"
        assert two.serving("a1") == {"toy-yolo:3.0.0"}
        assert two.agents["a1"].text().count(f"{ro.rollout_id}.a1.apply.2: STEP_RECEIVED") == 1
        for f in (one, two):
            f.close()
