"""Probe PyNvVideoCodec's ThreadedDecoder (demux and decode on a C++ thread) against the Demuxer +
Decoder pair the NVDEC source uses: what it returns, how long its frames stay valid, whether waiting in
``get_batch_frames`` releases the GIL, and what N Python threads of each deliver while a pure-Python
"ticker" thread measures how much of the GIL is left to everybody else (the pipeline's inference and
post-processing threads compete for it the same way). Prints one JSON object. ``--stress lock|nolock``
instead opens, reads past the end of and closes the NVDEC source with ``?prefetch`` on N threads at once,
with or without the source's lock around creating and ending decoders.

    python tools/bench/nvdec_threaded_probe.py CLIP [--streams 16,64] [--seconds 4]
    python tools/bench/nvdec_threaded_probe.py CLIP --stress lock --streams 64 --cycles 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from typing import Any

import numpy as np

from edgefleet.sdk._cuda._array import DeviceAllocation
from edgefleet.sdk._cuda._bindings import Stream, check, cudart, driver, use_device


def _planes(frame: Any) -> list[tuple[int, int, int, int]]:
    out = []
    for p in frame.cuda():
        cai = p.__cuda_array_interface__
        shape, strides = cai["shape"], cai.get("strides")
        pitch = int(strides[0]) if strides else int(shape[1]) * (int(shape[2]) if len(shape) > 2 else 1)
        out.append((int(cai["data"][0]), int(shape[0]), int(shape[1]), pitch))
    return out


def _checksum(frame: Any, stream: Stream) -> int:
    rt = cudart()
    total = 0
    for ptr, h, w, pitch in _planes(frame):
        host = np.empty((h, w), np.uint8)
        check(
            rt.cudaMemcpy2DAsync(
                host.ctypes.data, w, ptr, pitch, w, h, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.raw
            )
        )
        stream.synchronize()
        total += int(host.astype(np.uint64).sum())
    return total


class Ticker(threading.Thread):
    """Counts pure-Python loop iterations: its rate is the GIL left over for other work."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(200):
                pass
            self.count += 1


def _ticks_per_s(seconds: float) -> float:
    t = Ticker()
    t.start()
    time.sleep(seconds)
    n = t.count
    t.stop.set()
    t.join()
    return n / seconds


def semantics(nvc: Any, clip: str) -> dict[str, Any]:
    use_device(0)
    ctx = check(driver().cuCtxGetCurrent())
    s = Stream(0)
    out: dict[str, Any] = {}
    d = nvc.ThreadedDecoder(clip, buffer_size=8, gpu_id=0, cuda_context=int(ctx), cuda_stream=s.handle)
    meta = d.get_stream_metadata()
    out["meta"] = {
        k: str(getattr(meta, k, None)) for k in ("width", "height", "average_fps", "num_frames", "codec_name")
    }
    # the first call waits for decoding to start: does a Python thread keep running meanwhile?
    t = Ticker()
    t.start()
    t0 = time.perf_counter()
    first = d.get_batch_frames(4)
    waited = time.perf_counter() - t0
    t.stop.set()
    t.join()
    out["first_call_s"] = round(waited, 4)
    out["ticks_during_first_call"] = t.count
    out["frame_type"] = type(first[0]).__name__
    out["frame_attrs"] = [a for a in dir(first[0]) if not a.startswith("_")]
    out["planes"] = [(h, w, pitch) for _, h, w, pitch in _planes(first[0])]
    out["contiguous_nv12"] = len(_planes(first[0])) == 2 and _planes(first[0])[1][0] == (
        _planes(first[0])[0][0] + _planes(first[0])[0][3] * _planes(first[0])[0][1]
    )
    before = [_checksum(f, s) for f in first]
    second = d.get_batch_frames(4)
    second_sums = [_checksum(f, s) for f in second]
    after = [_checksum(f, s) for f in first]
    out["first_batch_unchanged_after_next_call"] = before == after
    third = d.get_batch_frames(8)
    out["first_batch_unchanged_after_two_calls"] = before == [_checksum(f, s) for f in first]
    out["second_batch_ptrs_reused_by_third"] = bool(
        {p[0] for f in second for p in _planes(f)[:1]} & {p[0] for f in third for p in _planes(f)[:1]}
    )
    # the same frames through Demuxer + Decoder
    demux = nvc.CreateDemuxer(filename=clip)
    dec = nvc.CreateDecoder(
        gpuid=0, codec=demux.GetNvCodecId(), cudacontext=int(ctx), cudastream=s.handle, usedevicememory=True
    )
    ref: list[int] = []
    for packet in demux:
        for f in dec.Decode(packet):
            if len(ref) < 8:
                ref.append(_checksum(f, s))
        if len(ref) >= 8:
            break
    out["matches_demuxer_decoder"] = before == ref[:4] and second_sums == ref[4:8]
    # to the end: how many frames, and what the end looks like
    n = 16
    shapes = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 30:
        batch = d.get_batch_frames(8)
        shapes.append(len(batch))
        if not batch:
            break
        n += len(batch)
    out["frames_total"] = n
    out["last_batch_sizes"] = shapes[-4:]
    out["end_s"] = round(time.perf_counter() - t0, 3)
    # again after the end
    t0 = time.perf_counter()
    again = d.get_batch_frames(8)
    out["after_end"] = {"len": len(again), "s": round(time.perf_counter() - t0, 3)}
    try:
        t0 = time.perf_counter()
        d.reconfigure_decoder(clip, 0)
        loop = d.get_batch_frames(4)
        out["reconfigure"] = {
            "s": round(time.perf_counter() - t0, 4),
            "len": len(loop),
            "same_first_frames": [_checksum(f, s) for f in loop] == ref[:4],
        }
    except Exception as exc:
        out["reconfigure"] = repr(exc)
    d.end()
    return out


def throughput(nvc: Any, clip: str, streams: int, mode: str, k: int, seconds: float) -> dict[str, Any]:
    """N threads, each decoding the clip in a loop and moving each frame into its own device slot."""
    use_device(0)
    ctx = int(check(driver().cuCtxGetCurrent()))
    rt = cudart()
    d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    counts = [0] * streams
    stop = threading.Event()
    ready = threading.Barrier(streams + 1)
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            use_device(0)
            s = Stream(0)
            slot = DeviceAllocation(1920 * 1080 * 3 // 2, 0)

            def move(frame: Any) -> None:
                planes = _planes(frame)
                y, h, w, yp = planes[0]
                check(rt.cudaMemcpy2DAsync(slot.ptr, w, y, yp, w, h, d2d, s.raw))
                uv, uh, _, up = planes[1]
                check(rt.cudaMemcpy2DAsync(slot.ptr + w * h, w, uv, up, w, uh, d2d, s.raw))

            if mode == "threaded":
                dec = nvc.ThreadedDecoder(
                    clip, buffer_size=max(8, 2 * k), gpu_id=0, cuda_context=ctx, cuda_stream=s.handle
                )
                dec.get_batch_frames(1)
                ready.wait()
                while not stop.is_set():
                    batch = dec.get_batch_frames(k)
                    if not batch:
                        dec.reconfigure_decoder(clip, 0)
                        continue
                    for f in batch:
                        move(f)
                    s.synchronize()
                    counts[i] += len(batch)
                dec.end()
            else:

                def fresh() -> tuple[Any, Any]:
                    demux = nvc.CreateDemuxer(filename=clip)
                    dec = nvc.CreateDecoder(
                        gpuid=0, codec=demux.GetNvCodecId(), cudacontext=ctx, cudastream=s.handle, usedevicememory=True
                    )
                    return demux, dec

                demux, dec = fresh()
                packets = iter(demux)
                ready.wait()
                while not stop.is_set():
                    packet = next(packets, None)
                    if packet is None:
                        demux, dec = fresh()  # a new session a loop, like the source with loop=1
                        packets = iter(demux)
                        continue
                    for f in dec.Decode(packet):
                        move(f)
                        s.synchronize()
                        counts[i] += 1
        except Exception as exc:
            errors.append(repr(exc))
            with contextlib.suppress(Exception):
                ready.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    ready.wait(120)
    time.sleep(0.5)
    c0, t0 = sum(counts), time.perf_counter()
    ticks = _ticks_per_s(seconds)
    c1, t1 = sum(counts), time.perf_counter()
    stop.set()
    for t in threads:
        t.join(10)
    return {
        "mode": mode,
        "streams": streams,
        "frames_per_call": k if mode == "threaded" else 1,
        "fps": round((c1 - c0) / (t1 - t0), 1),
        "ticker_per_s": round(ticks),
        "errors": errors[:3],
    }


def stress(clip: str, streams: int, cycles: int, frames: int, lock: bool) -> dict[str, Any]:
    """``streams`` threads each open the NVDEC source (prefetching), read ``frames`` frames, close it,
    ``cycles`` times over, all at once: what the benchmark's cells do one after another. ``lock=False``
    takes away the source's lock around creating and ending decoders."""
    import contextlib

    from edgefleet.sdk._sources import _nvdec, parse_source

    if not lock:
        _nvdec._LIFECYCLE = contextlib.nullcontext()  # type: ignore[assignment]
    errors: list[str] = []
    done = [0] * streams

    def worker(i: int) -> None:
        try:
            for _ in range(cycles):
                src = _nvdec.NvdecSource(parse_source(f"nvdec:{clip}?loop=1", i))
                src.open()
                h, w = src.frame_shape()  # type: ignore[misc]
                slot = src.frame_allocator(lambda s: np.empty(s, np.uint8))((h, w, 3))
                for _ in range(frames):
                    src.read(slot)
                src.close()
                done[i] += 1
        except Exception as exc:
            errors.append(repr(exc))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "lock": lock,
        "streams": streams,
        "cycles_done": sum(done),
        "errors": errors[:3],
        "s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clip")
    ap.add_argument("--streams", default="16,64")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--k", default="1,4")
    ap.add_argument("--stress", choices=["lock", "nolock"], help="only the open/read/close stress")
    ap.add_argument("--cycles", type=int, default=6)
    args = ap.parse_args()
    if args.stress:
        for n in (int(x) for x in args.streams.split(",")):
            print(json.dumps(stress(args.clip, n, args.cycles, 700, args.stress == "lock")), flush=True)
        return
    import PyNvVideoCodec as nvc  # noqa: N813

    result: dict[str, Any] = {"idle_ticker_per_s": round(_ticks_per_s(2.0))}
    result["semantics"] = semantics(nvc, args.clip)
    cells = []
    for n in (int(x) for x in args.streams.split(",")):
        cells.append(throughput(nvc, args.clip, n, "demuxer", 1, args.seconds))
        for k in (int(x) for x in args.k.split(",")):
            cells.append(throughput(nvc, args.clip, n, "threaded", k, args.seconds))
        print(json.dumps(cells[-1]), flush=True)
    result["cells"] = cells
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
