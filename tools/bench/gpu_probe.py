"""Where the GPU pipeline's time goes (run on the GPU machine; prints one JSON line per probe).

    python tools/bench/gpu_probe.py shapes   --model DIR           # infer at a fixed vs a varying batch size
    python tools/bench/gpu_probe.py contend  --model DIR --clip C  # infer while K threads decode the clip
    python tools/bench/gpu_probe.py pipeline --model DIR --clip C --streams S [--nvdec]
                                                                  # stage times, infer split into run/fetch
    python tools/bench/gpu_probe.py decode --clip C --streams S [--nvdec]
                                       # decode alone: a thread per stream, T round-robin threads, P processes
    python tools/bench/gpu_probe.py pcie                           # host<->device bandwidth, 1080p batches
    python tools/bench/gpu_probe.py nvdec  --clip C                # session open time, paced reads alone

Diagnostics for docs/gpu.md's analysis, not a benchmark of record (gpu_bench.py is).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def _ms(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3 if xs else np.zeros(1)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p95": round(float(np.percentile(a, 95)), 3)}


def _load(model: Path, batch: int, graph: bool = False, pad: bool = True) -> Any:
    from edgefleet.sdk import OnnxRuntimeConfig, load_package
    from edgefleet.sdk._model import load_model

    cfg = OnnxRuntimeConfig(cuda_graph=graph, pad_batch=pad)
    return load_model(load_package(model), cfg, device="cuda:0", max_batch=batch)


def probe_shapes(model: Path, batch: int, iters: int) -> None:
    """The same runs with the batch size varying from run to run, padded to the buffer or not."""
    rng = np.random.default_rng(0)
    sizes = [int(x) for x in rng.integers(1, batch + 1, iters)]
    for pad in (False, True):
        m = _load(model, batch, pad=pad)
        buf = m.buffers.get_nowait()
        for n in range(1, batch + 1):
            m.backend.infer(buf, n)
        for label, ns in (("fixed", [batch] * iters), ("varying", sizes)):
            lat = []
            for n in ns:
                t = time.perf_counter()
                m.backend.infer(buf, n)
                lat.append(time.perf_counter() - t)
            rec = {"probe": "shapes", "model": model.name, "pad_batch": pad, "mode": label}
            print(json.dumps({**rec, "batch_ms": _ms(lat), "mean_n": float(np.mean(ns))}))
        m.close()


def probe_contend(model: Path, clip: Path, batch: int, threads: list[int], seconds: float) -> None:
    import cv2

    m = _load(model, batch)
    buf = m.buffers.get_nowait()
    for k in threads:
        stop = threading.Event()

        def decode(stop: threading.Event = stop) -> None:
            cap = cv2.VideoCapture(str(clip))
            while not stop.is_set():
                ok, _ = cap.read()
                if not ok:
                    cap.set(cv2.CAP_PROP_POS_FRAMES, 0)

        ts = [threading.Thread(target=decode, daemon=True) for _ in range(k)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        lat = []
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            t1 = time.perf_counter()
            m.backend.infer(buf, batch)
            lat.append(time.perf_counter() - t1)
        stop.set()
        for t in ts:
            t.join()
        print(json.dumps({"probe": "contend", "decode_threads": k, "batch_ms": _ms(lat)}))
    m.close()


class Sampler(threading.Thread):
    """Counts where each thread is (innermost frame in this repository or a library) every ``period``
    seconds; a fallback where py-spy cannot attach. Biased by the GIL: it samples when it gets it."""

    def __init__(self, period: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.counts: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        names = {}
        while not self.stop.wait(self.period):
            for t in threading.enumerate():
                names[t.ident] = t.name
            for ident, frame in sys._current_frames().items():
                if ident == self.ident:
                    continue
                f, parts = frame, []
                while f is not None and len(parts) < 3:
                    parts.append(f"{Path(f.f_code.co_filename).name}:{f.f_lineno}:{f.f_code.co_name}")
                    f = f.f_back
                key = f"{str(names.get(ident, ident)).split('-')[0:2]} " + " < ".join(parts)
                self.counts[key] = self.counts.get(key, 0) + 1

    def top(self, n: int = 40) -> list[tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda kv: -kv[1])[:n]


def probe_pipeline(
    model: Path,
    clip: Path,
    streams: int,
    batch: int,
    nvdec: bool,
    frames: int,
    switch: float,
    sample: bool,
    upload: bool = False,
) -> None:
    from edgefleet.sdk import Pipeline
    from edgefleet.sdk._backends import _ort_cuda

    if switch > 0:
        sys.setswitchinterval(switch)
    run_t: list[float] = []
    fetch_t: list[float] = []
    orig_run, orig_fetch = _ort_cuda.DeviceBinding.run, _ort_cuda.DeviceBinding._fetch

    def timed_fetch(self: Any, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return orig_fetch(self, *args)
        finally:
            fetch_t.append(time.perf_counter() - t)

    def timed_run(self: Any, n: int) -> Any:
        t = time.perf_counter()
        out = orig_run(self, n)
        run_t.append(time.perf_counter() - t - (fetch_t[-1] if fetch_t else 0.0))
        return out

    _ort_cuda.DeviceBinding.run = timed_run  # type: ignore[method-assign]
    _ort_cuda.DeviceBinding._fetch = timed_fetch  # type: ignore[method-assign]
    src = f"nvdec:{clip}" if nvdec else str(clip)
    times: list[float] = []
    p = Pipeline(
        model,
        [src] * streams,
        device="cuda:0",
        max_batch=batch,
        max_frames=frames,
        batch_timeout_ms=5.0,
        on_result=lambda r: times.append(time.monotonic()),
        frame_upload=upload,
    )
    p.start()
    backend = p.model.backend
    bindings = [b.handle for b in p.model.buffers.queue]
    sampler = Sampler() if sample else None
    if sampler is not None:
        sampler.start()
    s = p.run()
    if sampler is not None:
        sampler.stop.set()
        for key, count in sampler.top():
            print(f"{count:6d}  {key}")
    k = len(times) // 5
    steady = (len(times) - 1 - k) / (times[-1] - times[k]) if len(times) > k + 1 else 0.0
    print(
        json.dumps(
            {
                "probe": "pipeline",
                "model": model.name,
                "streams": streams,
                "nvdec": nvdec,
                "switch_interval": sys.getswitchinterval(),
                "frame_upload": upload,
                "fps": round(steady, 1),
                "mean_batch": round(s.mean_batch, 2),
                "stage_ms_p50": {k2: round(v.p50_ms, 3) for k2, v in s.stages.items()},
                "ort_run_ms": _ms(run_t[k // 8 :]),
                "fetch_ms": _ms(fetch_t[k // 8 :]),
                "candidate_filter": getattr(backend, "_candidates", None),
                "output_shapes": {k2: (None if a is None else list(a.shape)) for k2, a in bindings[0].outputs.items()},
                "candidate_counts_max": [
                    None if b.candidate_counts is None else int(b.candidate_counts.max()) for b in bindings
                ],
                "output_specs": [list(o.shape) for o in backend.outputs],
            }
        ),
        flush=True,
    )


def _decode_streams(uri: str, streams: int, threads: int, frames: int) -> tuple[int, float]:
    """Decode ``streams`` copies of ``uri`` with ``threads`` threads, each serving its streams round-robin.
    Returns (frames decoded, seconds): the clock starts once every source is open (NVDEC sessions are
    created one at a time by the driver, ~55 ms each: timing them would measure the openings)."""
    from edgefleet.sdk._frames import frame_allocator
    from edgefleet.sdk._sources import create_source, parse_source

    sources = [create_source(parse_source(uri, i)) for i in range(streams)]
    slots = []
    for src in sources:
        src.open()
        h, w = src.frame_shape() or (1080, 1920)
        slots.append(src.frame_allocator(frame_allocator("cuda:0"))((h, w, 3)))
    done = [0] * threads

    def work(k: int) -> None:
        mine = list(zip(sources[k::threads], slots[k::threads], strict=True))
        for _ in range(frames):
            for src, slot in mine:
                if src.read(slot) is not None:
                    done[k] += 1

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    seconds = time.perf_counter() - t0
    for src in sources:
        src.close()
    return sum(done), seconds


def _decode_proc(args: tuple[str, int, int, int]) -> tuple[int, float]:
    return _decode_streams(*args)


def probe_decode(clip: Path, streams: int, nvdec: bool, frames: int) -> None:
    """Decode alone: a thread per stream, 4 threads round-robin, 4 processes of 4 threads (their decoding
    overlaps, so the processes' rate is the frames over the slowest one's decoding time)."""
    import multiprocessing as mp

    uri = f"nvdec:{clip}" if nvdec else str(clip)
    for mode, threads, procs in (("thread-per-stream", streams, 1), ("round-robin", 4, 1), ("processes", 4, 4)):
        if threads > streams:
            continue
        if procs == 1:
            n, dt = _decode_streams(uri, streams, threads, frames)
        else:
            per = streams // procs
            with mp.get_context("spawn").Pool(procs) as pool:
                parts = pool.map(_decode_proc, [(uri, per, max(1, threads // procs), frames)] * procs)
            n, dt = sum(x[0] for x in parts), max(x[1] for x in parts)
        rec = {"probe": "decode", "nvdec": nvdec, "streams": streams, "mode": mode, "threads": threads}
        print(json.dumps({**rec, "processes": procs, "frames": n, "fps": round(n / dt, 1)}), flush=True)


def probe_pcie(frame_bytes: int = 1920 * 1080 * 3, frames: int = 32, repeats: int = 5) -> None:
    """Host-to-device bandwidth for a batch of 1080p BGR frames: one big copy, one copy per frame on one
    stream (what the preprocessor does), per-frame copies spread over 2 and 4 streams, and from pageable
    memory; device-to-host for reference. Best of ``repeats``, GB/s."""
    from edgefleet.sdk._cuda._array import DeviceArray
    from edgefleet.sdk._cuda._bindings import Stream, check, cudart, use_device
    from edgefleet.sdk._cuda._memory import pinned_array

    use_device(0)
    rt = cudart()
    h2d, d2h = rt.cudaMemcpyKind.cudaMemcpyHostToDevice, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    total = frame_bytes * frames
    pinned = pinned_array((total,), np.uint8, ordinal=0)
    pinned[:] = 7
    pageable = np.full(total, 7, np.uint8)
    dev = DeviceArray.empty((total,), np.uint8, 0)
    streams = [Stream(0) for _ in range(4)]

    def timed(host: np.ndarray, chunks: int, nstreams: int, kind: Any = h2d) -> float:
        best = 0.0
        size = total // chunks
        for _ in range(repeats):
            t0 = time.perf_counter()
            for c in range(chunks):
                s = streams[c % nstreams]
                a, b = (dev.ptr + c * size, host.ctypes.data + c * size)
                dst, src = (a, b) if kind == h2d else (b, a)
                check(rt.cudaMemcpyAsync(dst, src, size, kind, s.raw), "cudaMemcpyAsync")
            for s in streams[:nstreams]:
                s.synchronize()
            best = max(best, total / (time.perf_counter() - t0) / 1e9)
        return round(best, 1)

    rec = {
        "probe": "pcie",
        "batch_mb": round(total / 1e6, 1),
        "h2d_pinned_one_copy_gbs": timed(pinned, 1, 1),
        "h2d_pinned_per_frame_1_stream_gbs": timed(pinned, frames, 1),
        "h2d_pinned_per_frame_2_streams_gbs": timed(pinned, frames, 2),
        "h2d_pinned_per_frame_4_streams_gbs": timed(pinned, frames, 4),
        "h2d_pageable_per_frame_gbs": timed(pageable, frames, 1),
        "d2h_pinned_one_copy_gbs": timed(pinned, 1, 1, d2h),
    }
    print(json.dumps(rec), flush=True)


def _paced_read(src: Any, frames: int, barrier: threading.Barrier, out: list[Any], i: int) -> None:
    """Open, wait for the others, read ``frames`` frames on a 30 fps schedule (as the source runner
    paces); out[i] = (open s, lag behind the schedule at the end s, read times s, frames read)."""
    from edgefleet.sdk._frames import frame_allocator

    t = time.perf_counter()
    src.open()
    h, w = src.frame_shape() or (1080, 1920)
    slots = [src.frame_allocator(frame_allocator("cuda:0"))((h, w, 3)) for _ in range(2)]
    opened = time.perf_counter() - t
    barrier.wait()
    t0 = time.monotonic()
    reads: list[float] = []
    for k in range(frames):
        delay = t0 + k / 30.0 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        r0 = time.monotonic()
        if src.read(slots[k % 2]) is None:
            break
        reads.append(time.monotonic() - r0)
    out[i] = (opened, time.monotonic() - (t0 + (frames - 1) / 30.0), reads, len(reads))
    src.close()


def probe_nvdec(clip: Path, streams: list[int], seconds: float) -> None:
    """NVDEC sessions: the frame rate the demuxer reports, how long opening takes (alone and S at once),
    and S sources read on a 30 fps schedule with no pipeline: does each keep its schedule?"""
    from edgefleet.sdk._sources import create_source, parse_source

    for uri in (f"nvdec:{clip}", str(clip)):
        src = create_source(parse_source(uri, 0))
        t0 = time.perf_counter()
        src.open()
        first_open = time.perf_counter() - t0
        fps = src.nominal_fps()
        src.close()
        t0 = time.perf_counter()
        src.open()
        second_open = time.perf_counter() - t0
        src.close()
        print(
            json.dumps(
                {
                    "probe": "nvdec-open",
                    "uri": "nvdec" if uri.startswith("nvdec:") else "file",
                    "nominal_fps": fps,
                    "first_open_ms": round(first_open * 1e3, 1),
                    "second_open_ms": round(second_open * 1e3, 1),
                }
            ),
            flush=True,
        )
        for s in streams:
            sources = [create_source(parse_source(uri, i)) for i in range(s)]
            frames = int(30 * seconds)
            out: list[Any] = [(0.0, 0.0, [0.0], 0)] * s
            barrier = threading.Barrier(s)
            ts = [threading.Thread(target=_paced_read, args=(sources[i], frames, barrier, out, i)) for i in range(s)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            opened, lags, read_lists, got = (list(x) for x in zip(*out, strict=True))
            reads = np.concatenate([np.asarray(r) for r in read_lists]) * 1e3
            print(
                json.dumps(
                    {
                        "probe": "paced-read",
                        "decoder": "nvdec" if uri.startswith("nvdec:") else "cpu",
                        "streams": s,
                        "frames_each": frames,
                        "frames_read": sum(got),
                        "open_ms_max": round(max(opened) * 1e3, 1),
                        "lag_s_max": round(max(lags), 3),
                        "lag_s_p50": round(float(np.median(lags)), 3),
                        "read_ms_p50": round(float(np.percentile(reads, 50)), 2),
                        "read_ms_p99": round(float(np.percentile(reads, 99)), 2),
                        "read_ms_max": round(float(reads.max()), 1),
                        "reads_over_33ms": int((reads > 33.3).sum()),
                    }
                ),
                flush=True,
            )


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("probe", choices=["shapes", "contend", "pipeline", "decode", "pcie", "nvdec"])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--clip", type=Path)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--nvdec", action="store_true")
    ap.add_argument("--switch", type=float, default=0.0)
    ap.add_argument("--sample", action="store_true")
    ap.add_argument("--upload", action="store_true", help="upload CPU-decoded frames whole (frame_upload)")
    a = ap.parse_args(argv)
    if a.probe == "shapes":
        probe_shapes(a.model, a.batch, 60)
    elif a.probe == "contend":
        probe_contend(a.model, a.clip, a.batch, [0, 1, 4, 16], 2.0)
    elif a.probe == "decode":
        probe_decode(a.clip, a.streams, a.nvdec, a.frames)
    elif a.probe == "pcie":
        probe_pcie()
    elif a.probe == "nvdec":
        probe_nvdec(a.clip, [16, 64], 6.0)
    else:
        probe_pipeline(a.model, a.clip, a.streams, a.batch, a.nvdec, a.frames, a.switch, a.sample, a.upload)


if __name__ == "__main__":
    main(sys.argv[1:])
