"""Built-in analytics stages in a process of their own (``analytics_process: true``).

At 64 streams on a GPU a pipeline's throughput is bound by the Python work of its threads under one GIL
(docs/gpu.md); the tracker and the zones are a third of that work. Here they run in a separate process,
one per pipeline, each stage built there from its config: the pipeline's result thread sends a batch of
results as columns (``_wire``) and attaches what comes back (track columns, ended tracks, events, region
counts), a few microseconds a frame; consecutive stages of the process take one round trip per batch.

Only the built-in stages (:data:`REMOTE_TYPES`) go there: an app's own stage, or one registered at run
time, stays in the pipeline's process (the analytics process knows only what it imports). A stage's
error comes back as an :class:`AnalyticsError` naming it; the process exiting fails the pipeline the
same way, with its exit code.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._decoders import BatchColumns
from .._errors import AnalyticsError
from .._results import Result
from ._base import AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange
from ._channel import Channel
from ._wire import WireReply, apply_reply, encode_batch

__all__ = ["REMOTE_TYPES", "AnalyticsProcess", "RemoteStage", "Sent"]

_log = logging.getLogger(__name__)
#: the stage types that run in the analytics process
REMOTE_TYPES = frozenset({"track", "zones"})
#: the longest a request waits for its answer (a batch of 256 frames takes milliseconds)
ANSWER_TIMEOUT_S = 120.0
_START = "from edgefleet.sdk._analytics._worker import main; main()"


@dataclass
class Sent:
    """A batch sent to the analytics process whose answer is not taken yet (:meth:`AnalyticsProcess.take`)."""

    stages: Sequence[RemoteStage]
    results: list[Result]
    offsets: list[int]
    what: str
    owned: bool = False  # nobody else holds the results yet: the answer is attached to them in place
    decoded: bool = False  # and their detections are a built-in decoder's, one object per frame
    answer: Any = None  # received early: another request came before the take


class AnalyticsProcess:
    """The analytics process of one pipeline: started by the first stage opened, stopped by :meth:`stop`.
    Requests are serialised (one lock): the result thread's batches, and the live changes' open, close
    and stream removals between them. A batch may be sent and its answer taken later (:meth:`send`,
    :meth:`take`); a request made in between receives that answer first and keeps it for the take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Channel | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._keys = itertools.count(1)
        self._last: dict[tuple[str, ...], dict[str, Any]] = {}  # per group of stages, per stream: regions
        self._in_flight: Sent | None = None  # sent, its answer not received yet

    def key(self, config: AnalyticsConfig) -> str:
        return f"{config.type}-{next(self._keys)}"

    def _start(self) -> Channel:
        if self._conn is not None:
            return self._conn
        mine, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # what this process imports from
        env.setdefault("OMP_NUM_THREADS", "1")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _START, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            mine.close()
            raise AnalyticsError(f"could not start the analytics process: {exc}") from None
        finally:
            theirs.close()
        self._conn = Channel(mine)
        return self._conn

    def _exited(self, what: str) -> AnalyticsError:
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._drop()
        return AnalyticsError(f"the analytics process exited (code {code}) {what}")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _send(self, message: tuple[Any, ...], what: str) -> None:
        conn = self._start()
        try:
            conn.send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            raise self._exited(what) from None

    def _receive(self, what: str) -> Any:
        conn = self._conn
        if conn is None:
            raise AnalyticsError(f"the analytics process is gone {what}")
        try:
            return pickle.loads(conn.recv(ANSWER_TIMEOUT_S))  # noqa: S301 (our own child, over a socket pair)
        except TimeoutError:
            raise AnalyticsError(f"the analytics process did not answer in {ANSWER_TIMEOUT_S:.0f} s {what}") from None
        except (EOFError, OSError):
            raise self._exited(what) from None

    def _settle(self) -> None:
        """Receive the answer of a batch sent and not taken yet (kept for its take)."""
        sent, self._in_flight = self._in_flight, None
        if sent is not None:
            try:
                sent.answer = self._receive(sent.what)
            except AnalyticsError as exc:
                sent.answer = ("failed", exc)

    def request(self, message: tuple[Any, ...], what: str) -> tuple[Any, ...]:
        """Send one request and wait for its answer; raises :class:`AnalyticsError` on a stage's error."""
        with self._lock:
            self._settle()
            self._send(message, what)
            answer = self._receive(what)
        if answer[0] == "error":
            raise AnalyticsError(f"analytics {what}: {answer[1]}")
        return tuple(answer[1:])

    def notify(self, message: tuple[Any, ...], what: str) -> None:
        """Send a request nobody waits for (its failure comes back with the next answer). The process
        handles requests in order: one sent while a batch is in flight applies after that batch."""
        with self._lock:
            if self._conn is None:
                return  # never started, or gone: the next request says so
            self._send(message, what)

    def process(self, stages: Sequence[RemoteStage], results: list[Result]) -> list[Result]:
        """One batch through consecutive stages of this process, in one round trip."""
        return self.take(self.send(stages, results))

    def send(
        self,
        stages: Sequence[RemoteStage],
        results: list[Result],
        columns: BatchColumns | None = None,
        *,
        owned: bool = False,
    ) -> Sent:
        """Send one batch through consecutive stages of this process; :meth:`take` its answer (the process
        works on it meanwhile). One batch in flight at a time: sending another takes nothing for you.
        ``columns``: the decoder's, of these results alone (``encode_batch``); ``owned``: nobody but the
        caller has seen the results, so the answer may be attached to them in place (``apply_reply``), and
        with ``columns`` the track columns into their detections themselves."""
        batch = encode_batch(results, columns)
        names = ", ".join(s.config.type for s in stages)
        sent = Sent(stages, results, batch.offsets, f"({names}): process", owned, owned and columns is not None)
        with self._lock:
            self._settle()
            self._send(("process", tuple(s.key for s in stages), batch), sent.what)
            self._in_flight = sent
        return sent

    def answered(self, sent: Sent, timeout: float) -> bool:
        """Whether :meth:`take` would not wait for ``sent``'s answer (waiting up to ``timeout`` seconds for
        it, off the GIL); True too when the process is gone (the take says so)."""
        with self._lock:
            conn = self._conn
            if self._in_flight is not sent or conn is None:
                return True  # received already (kept for its take), or nothing will come
        try:  # outside the lock: a live change may send meanwhile (it receives this answer first, for the take)
            return conn.ready(timeout)
        except (OSError, ValueError):  # closed meanwhile: the take says what happened
            return True

    def take(self, sent: Sent) -> list[Result]:
        """The results of a batch :meth:`send` sent, with what its stages added."""
        with self._lock:
            if self._in_flight is sent:
                self._in_flight = None
                sent.answer = self._receive(sent.what)
        answer = sent.answer
        if answer is None:
            raise AnalyticsError(f"analytics {sent.what}: taken twice, or never sent")
        sent.answer = None
        if answer[0] == "failed":
            raise answer[1]
        if answer[0] == "error":
            raise AnalyticsError(f"analytics {sent.what}: {answer[1]}")
        reply, stats = answer[1:]
        assert isinstance(reply, WireReply)
        keys = tuple(s.key for s in sent.stages)
        for stage in sent.stages:
            stage.figures = stats.get(stage.key, {})
        last = self._last.setdefault(keys, {})
        return apply_reply(sent.results, reply, sent.offsets, last, in_place=sent.owned, own_detections=sent.decoded)

    def forget(self, stream: str | None = None, key: str | None = None) -> None:
        """A stream left (its region counts are forgotten), or a stage closed (its groups are)."""
        for group in list(self._last):
            if key is not None and key in group:
                del self._last[group]
            elif stream is not None:
                self._last[group].pop(stream, None)

    def stop(self) -> None:
        """Stop the process (its stages close there); waits a few seconds, then kills it."""
        with self._lock:
            if self._conn is not None:
                self._settle()  # a batch in flight keeps its answer for its take
            conn, proc = self._conn, self._proc
            self._conn = self._proc = None
            if conn is None or proc is None:
                return
            try:
                conn.send(pickle.dumps(("stop",)))
                conn.ready(5.0)
            except OSError:
                pass
            finally:
                conn.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _log.warning("the analytics process did not stop in 5 s: killed")
                proc.kill()
                proc.wait()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None


class RemoteStage(AnalyticsStage):
    """A built-in stage running in the pipeline's analytics process (see the module)."""

    def __init__(self, worker: AnalyticsProcess, config: AnalyticsConfig) -> None:
        self.worker = worker
        self.config = config
        self.key = worker.key(config)
        self.figures: Mapping[str, float | int] = {}

    def open(self, ctx: AnalyticsContext) -> None:
        (self.figures,) = self.worker.request(("open", self.key, self.config, ctx), f"{self.config.type}: open")

    def process(self, results: list[Result]) -> list[Result]:
        return self.worker.process([self], results)

    def on_model_change(self, change: ModelChange) -> None:
        self.worker.notify(("change", self.key, change), f"{self.config.type}: model change")

    def on_stream_removed(self, stream_id: str) -> None:
        self.worker.forget(stream=stream_id)
        self.worker.notify(("removed", self.key, stream_id), f"{self.config.type}: stream removed")

    def stats(self) -> Mapping[str, float | int]:
        return self.figures

    def close(self) -> None:
        self.worker.forget(key=self.key)
        if self.worker.pid is not None:
            self.worker.request(("close", self.key), f"{self.config.type}: close")
