"""The analytics process: runs built-in analytics stages for one pipeline, on requests from ``_remote``.

Started by :class:`~edgefleet.sdk._analytics._remote.AnalyticsProcess` as ``python -c`` with the file
descriptor of its end of a socket pair; it reads requests until the pipeline says stop or its end of the
socket closes (the pipeline's process is gone), and answers each that asks for an answer. A stage's
failure is answered as an error (its type and message) and the stage stays; only a broken socket ends
the process.
"""

from __future__ import annotations

import contextlib
import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

from ._base import AnalyticsStage, build_stage
from ._wire import decode_batch, encode_reply

__all__ = ["main", "serve"]


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def serve(conn: Connection) -> None:
    stages: dict[str, AnalyticsStage] = {}
    sent: dict[tuple[str, ...], dict[str, object]] = {}  # per group of stages, per stream: the region counts last sent
    pending: str | None = None  # a failure of a request nobody waits for: the next answer reports it
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())  # noqa: S301 (the parent, over a socket pair)
        except (EOFError, OSError):
            return
        op = request[0]
        if op == "stop":
            for stage in stages.values():
                with contextlib.suppress(Exception):  # stopping: nobody to tell
                    stage.close()
            _send(conn, ("ok",))
            return
        try:
            answer = _handle(op, request, stages, sent)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if op in _UNANSWERED:
                pending = pending or error
            else:
                _send(conn, ("error", error))
            continue
        if answer is None:
            continue
        if pending is not None:
            _send(conn, ("error", pending))
            pending = None
        else:
            _send(conn, ("ok", *answer))


#: requests the pipeline does not wait on
_UNANSWERED = ("change", "removed")


def _handle(
    op: str,
    request: tuple[Any, ...],
    stages: dict[str, AnalyticsStage],
    sent: dict[tuple[str, ...], dict[str, object]],
) -> tuple[Any, ...] | None:
    if op == "open":
        _, key, config, ctx = request
        stage = build_stage(config)
        stage.open(ctx)
        stages[key] = stage
        return (dict(stage.stats()),)
    if op == "process":
        _, keys, batch = request
        given = decode_batch(batch)
        results = given
        for key in keys:
            results = stages[key].process(results)
            if len(results) != len(given):
                raise ValueError(f"process() returned {len(results)} results for {len(given)}")
        reply = encode_reply(given, results, sent.setdefault(tuple(keys), {}))
        return (reply, {key: dict(stages[key].stats()) for key in keys})
    if op == "change":
        _, key, change = request
        stages[key].on_model_change(change)
        return None
    if op == "removed":
        _, key, stream = request
        for streams in sent.values():
            streams.pop(stream, None)
        stages[key].on_stream_removed(stream)
        return None
    if op == "close":
        _, key = request
        stage = stages.pop(key)
        for group in [g for g in sent if key in g]:
            del sent[group]
        stage.close()
        return ()
    raise ValueError(f"unknown request {op!r}")


def main() -> None:
    conn = Connection(int(sys.argv[1]))
    try:
        serve(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
