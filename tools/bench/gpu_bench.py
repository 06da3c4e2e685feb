"""GPU benchmarks of the edgefleet data path (run on the GPU machine).

    python tools/bench/gpu_bench.py --models DIR --clip CLIP.mp4 --out RESULT.json --suite raw,naive
    python tools/bench/gpu_bench.py ... --suite pipeline,density

Suites (each cell is one JSON record; the file is rewritten after every cell, so a run cut short keeps
what it measured):
  raw       (a) backend.infer on device-resident input (ONNX Runtime CUDA + IOBinding), outputs to host
  naive     (b) OpenCV decode → CPU letterbox → session.run on host arrays, one loop
  pipeline  (c) Pipeline end to end, CPU decode (OpenCV) into mapped pinned slots, GPU preprocessing;
            (d) the same with the NVDEC source; S streams of the whole clip, frames/s and p95 latency
            while every stream runs, copies/frame
  density   streams paced at the clip's 30 fps (realtime): p95 end-to-end latency <= 100 ms, no drops,
            and every frame captured within 100 ms of its schedule, at S streams?
  nodecode  (c) with a generated 1080p pattern instead of a decoder (one host write + one upload per
            frame): the pipeline where decode is not the limit, judged against (a)
  decode    the sources alone (no model): S threads reading the clip into their frame slots, CPU (OpenCV
            into pinned slots) and NVDEC, timed once every source is open

Options: --host-frames upload (frames uploaded whole instead of read in place), --cuda-graph, --decoders (cpu,
nvdec, nvdec-sync, nvdec-prefetch, nvdec-replay: see _uri),
--only MODELS, --streams, --density-streams, --infer-workers 1,2 (every pipeline and density cell once per
count, side by side; raw adds the batch-32 ceiling of that many concurrent lanes, each its own session and
CUDA stream), --switch-interval S (CPython's GIL switch interval for the whole run), --analytics none,track
(every pipeline and density cell once per setting, side by side: ``track`` adds ByteTrack and a zone and a
line, in normalised coordinates, to the pipeline, on their own thread; ``track-inline`` the same on the
decoding thread, ``analytics_thread=False``; ``track-process`` the same in the analytics process,
``analytics_process=True``; ``track-process-inline`` that from the decoding thread;
``track-process-copy-inline`` that on the general wire (no decoder columns, the answer into copies); ``pass`` one app
stage that does nothing, on its own thread; with any of them, or with ``--only nanodet-fp32``, the pipeline
suite also runs NanoDet at 64 streams).

Analytics at 64 streams (the real detector, with and without tracking, interleaved):

    python tools/bench/gpu_bench.py --models DIR --clip CLIP.mp4 --out h200-analytics.json \
        --suite pipeline,density --only nanodet-fp32 --streams 64 --density-streams 64 \
        --analytics none,track,track-inline,track-process
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _cpu import CpuSampler
from _gc import GcTimer
from _nvml import EngineSampler
from _waits import QueueWaits

ROOT = Path(__file__).resolve().parents[2]
_OPTIONS: dict[str, Any] = {
    "frame_upload": False,
    "cuda_graph": False,
    "workers": [1],
    "analytics": ["none"],
    "cuda_calls": ["held"],
    "child_probe": False,
    "gc_freeze": False,
    "post_queue": 0,
}
DENSITY_MODELS = ("yolov8n-fp16", "nanodet-fp32")  # the density suite runs the first one measured
ANALYTICS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "track": [
        {"type": "track"},
        {
            "type": "zones",
            "zones": [{"name": "left", "points": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]], "normalized": True}],
            "lines": [{"name": "middle", "points": [[0.5, 0], [0.5, 1]], "normalized": True}],
        },
    ],
}
ANALYTICS["track-inline"] = ANALYTICS["track"]  # the same stages on the decoding thread (analytics_thread=False)
ANALYTICS["track-process"] = ANALYTICS["track"]  # the same stages in the analytics process (analytics_process=True)
# the analytics process called from the decoding thread (analytics_process=True, analytics_thread=False)
ANALYTICS["track-process-inline"] = ANALYTICS["track"]
# that, on the general wire: the decoder's columns joined again from the frames, the answer attached to
# copies of the results (what the pipeline did before it sent a decoder's batch as its columns)
ANALYTICS["track-process-copy-inline"] = ANALYTICS["track"]
ANALYTICS["pass"] = []  # one app stage that returns its results as they are, on its own thread: the thread's cost


def _stages(analytics: str) -> list[Any]:
    if analytics != "pass":
        return ANALYTICS[analytics]
    from edgefleet.sdk import AnalyticsStage

    class Pass(AnalyticsStage):
        def process(self, results: list[Any]) -> list[Any]:
            return results

    return [Pass()]


def _env() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    try:
        import onnxruntime as ort

        info["onnxruntime"] = ort.__version__
        info["ort_providers"] = ort.get_available_providers()
    except ImportError:
        pass
    try:
        from edgefleet.sdk._cuda._bindings import device_info

        d = device_info(0)
        info["gpu"] = {"name": d.name, "arch": d.arch, "memory_gb": round(d.total_memory / 2**30, 1)}
    except Exception as exc:
        info["gpu"] = f"unavailable: {exc}"
    return info


class Recorder:
    def __init__(self, path: Path, argv: list[str]) -> None:
        self.path = path
        self.doc: dict[str, Any] = {
            "command": "python tools/bench/gpu_bench.py " + " ".join(argv),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": _env(),
            "results": [],
        }
        self.flush()

    def add(self, rec: dict[str, Any]) -> None:
        self.doc["results"].append(rec)
        print(json.dumps(rec), flush=True)
        self.flush()

    def flush(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.doc, indent=1), encoding="utf-8")


def _model_dirs(models: Path, names: list[str]) -> dict[str, Path]:
    out = {}
    for n in names:
        p = ROOT / "models" / "nanodet-m" if n == "nanodet-fp32" else models / n
        if (p / "manifest.yaml").exists():
            out[n] = p
    return out


# --- (a) raw ---------------------------------------------------------------------------------------
def bench_raw(rec: Recorder, models: dict[str, Path], batches: list[int], seconds: float) -> None:
    from edgefleet.sdk import OnnxRuntimeConfig, load_package
    from edgefleet.sdk._cuda._array import as_device_array
    from edgefleet.sdk._model import load_model

    for name, path in models.items():
        pkg = load_package(path)
        top = max(batches)
        for b, graph in [(b, False) for b in batches] + [(top, True)]:
            # the buffer holds exactly b rows: every run is a full one, as a saturated pipeline's are
            m = load_model(pkg, OnnxRuntimeConfig(cuda_graph=graph), device="cuda:0", max_batch=b, warmup=False)
            buf = m.buffers.get_nowait()
            dev = as_device_array(buf.array)
            dev.copy_from_host(np.random.default_rng(0).random(dev.shape).astype(dev.dtype))
            for _ in range(3):
                m.backend.infer(buf, b)
            n, t0 = 0, time.perf_counter()
            lat = []
            while time.perf_counter() - t0 < seconds:
                t1 = time.perf_counter()
                m.backend.infer(buf, b)
                lat.append(time.perf_counter() - t1)
                n += 1
            dt = time.perf_counter() - t0
            rec.add(
                {
                    "suite": "raw",
                    "model": name,
                    "batch": b,
                    "cuda_graph": graph,
                    "images_per_s": round(n * b / dt, 1),
                    "batch_ms_p50": round(float(np.median(lat)) * 1e3, 3),
                    "note": "backend.infer: device input, ORT run_with_iobinding, outputs (detector: GPU-filtered "
                    "candidates; classifier: each row's top k found on the GPU) copied to host",
                }
            )
            m.close()
        for w in [w for w in _OPTIONS["workers"] if w > 1]:
            rec.add(_raw_lanes(pkg, name, top, w, seconds))


def _raw_lanes(pkg: Any, name: str, b: int, workers: int, seconds: float) -> dict[str, Any]:
    """``workers`` threads each running full batches on their own buffer, as a pipeline's inference
    workers do (each thread takes its own lane: session + CUDA stream)."""
    import threading

    from edgefleet.sdk import OnnxRuntimeConfig
    from edgefleet.sdk._cuda._array import as_device_array
    from edgefleet.sdk._model import load_model

    m = load_model(
        pkg, OnnxRuntimeConfig(), device="cuda:0", max_batch=b, warmup=False, buffers=workers, workers=workers
    )
    bufs = [m.buffers.get_nowait() for _ in range(workers)]
    for buf in bufs:
        dev = as_device_array(buf.array)
        dev.copy_from_host(np.random.default_rng(0).random(dev.shape).astype(dev.dtype))
    ready = threading.Barrier(workers + 1)
    stop = threading.Event()
    runs = [0] * workers

    def worker(i: int) -> None:
        for _ in range(3):
            m.backend.infer(bufs[i], b)
        ready.wait()
        ready.wait()
        while not stop.is_set():
            m.backend.infer(bufs[i], b)
            runs[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    ready.wait()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    m.close()
    return {
        "suite": "raw",
        "model": name,
        "batch": b,
        "cuda_graph": False,
        "infer_workers": workers,
        "images_per_s": round(sum(runs) * b / dt, 1),
        "note": f"{workers} threads, each its own lane (ORT session + CUDA stream) and buffer, as the pipeline's "
        "inference workers",
    }


# --- (b) naive -------------------------------------------------------------------------------------
def bench_naive(rec: Recorder, models: dict[str, Path], clip: Path, batches: list[int], frames: int) -> None:
    import cv2
    import onnxruntime as ort

    from edgefleet.sdk import load_package
    from edgefleet.sdk._preprocess import CpuPreprocessor

    for name, path in models.items():
        pkg = load_package(path)
        spec = pkg.manifest.input
        sess = ort.InferenceSession(str(pkg.model_path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        pre = CpuPreprocessor(spec)
        for b in batches:
            cap = cv2.VideoCapture(str(clip))
            x = np.zeros((b, *spec.shape[1:]), spec.dtype)
            done, t0 = 0, time.perf_counter()
            while done < frames:
                k = 0
                while k < b:
                    ok, img = cap.read()
                    if not ok:
                        cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                        continue
                    pre.write(img, x[k])
                    k += 1
                sess.run(None, {spec.name: x})
                done += b
            dt = time.perf_counter() - t0
            rec.add(
                {
                    "suite": "naive",
                    "model": name,
                    "batch": b,
                    "frames": done,
                    "fps": round(done / dt, 1),
                    "note": "one thread: cv2 decode, CPU letterbox, session.run(host)",
                }
            )


def _read_frames(
    src: Any,
    per: int,
    counts: list[int],
    i: int,
    errors: list[str],
    start: Any,
    opened: list[float],
    stamps: list[list[float]],
) -> None:
    """Open (timed on its own), wait for every stream to be open, then read ``per`` frames."""
    from edgefleet.sdk._frames import frame_allocator

    try:
        try:
            t0 = time.perf_counter()
            src.open()
            h, w = src.frame_shape() or (1080, 1920)
            slots = [src.frame_allocator(frame_allocator("cuda:0"))((h, w, 3)) for _ in range(2)]
            opened[i] = time.perf_counter() - t0
        finally:
            start.wait()
        while counts[i] < per:
            if src.read(slots[counts[i] % 2]) is None:
                break
            counts[i] += 1
            stamps[i].append(time.perf_counter())
    except Exception as exc:  # recorded, not raised: one cell must not end the suite
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        src.close()


def _uri(clip: Path, decoder: str) -> str:
    """cpu: OpenCV; nvdec: PyNvVideoCodec on the source's thread (the default); nvdec-prefetch: its
    ThreadedDecoder four frames ahead (``?prefetch=4``); nvdec-sync: ``?prefetch=0`` spelled out;
    nvdec-replay: the clip (600 frames) decoded once and replayed from device memory (``_replay``)."""
    if decoder == "nvdec-replay":
        import _replay

        _replay.register()
        return f"replay:{clip}?frames=600"  # the whole clip, as the nvdec cells read it
    if decoder in ("nvdec-sync", "nvdec-prefetch"):
        return f"nvdec:{clip}?prefetch={0 if decoder == 'nvdec-sync' else 4}"
    return f"nvdec:{clip}" if decoder == "nvdec" else str(clip)


def _steady_window(stamps: list[list[float]]) -> tuple[float, float]:
    """While every stream runs: from the last stream's first timestamp to the first stream's last one."""
    ran = [st for st in stamps if st]
    return (max(st[0] for st in ran), min(st[-1] for st in ran)) if ran else (0.0, 0.0)


# --- decode ceiling --------------------------------------------------------------------------------
def bench_decode(rec: Recorder, clip: Path, streams: list[int], decoders: list[str], frames_total: int) -> None:
    """S threads each decode their own copy of the clip; the clock starts once every source is open
    (opening NVDEC sessions takes tens of ms each and is reported apart). ``steady_fps``: frames read while
    every stream runs (the first stream to end closes its session, which stalls the others), the same
    window as the pipeline suite's figure."""
    import threading

    from edgefleet.sdk._sources import create_source, parse_source

    for dec in decoders:
        for s in streams:
            per = min(600, max(150, frames_total // s))
            uri = _uri(clip, dec)
            sources = [create_source(parse_source(uri, i)) for i in range(s)]
            counts = [0] * s
            opened = [0.0] * s
            errors: list[str] = []
            stamps: list[list[float]] = [[] for _ in range(s)]
            start = threading.Barrier(s + 1)
            threads = [
                threading.Thread(target=_read_frames, args=(sources[i], per, counts, i, errors, start, opened, stamps))
                for i in range(s)
            ]
            t_open = time.perf_counter()
            with EngineSampler(clock=time.perf_counter) as engines:
                for t in threads:
                    t.start()
                start.wait()
                t0 = time.perf_counter()
                for t in threads:
                    t.join()
                dt = time.perf_counter() - t0
            ran = [st for st in stamps if st]
            lo, hi = _steady_window(ran)
            inside = sum(1 for st in ran for t in st if lo < t <= hi)
            rec.add(
                {
                    "suite": "decode",
                    "decode": dec,
                    "streams": s,
                    "frames": sum(counts),
                    "fps": round(sum(counts) / dt, 1),
                    "steady_fps": round(inside / (hi - lo), 1) if hi > lo else 0.0,
                    "open_all_s": round(t0 - t_open, 3),
                    "open_each_ms_max": round(1000 * max(opened), 1),
                    "engines_steady": engines.summary(lo, hi),
                    "note": "sources only, timed once all are open; no model",
                    **({"errors": errors[:3]} if errors else {}),
                }
            )


# --- (c)/(d) pipeline ------------------------------------------------------------------------------
def _pipeline(
    model: Path,
    sources: list[Any],
    batch: int,
    frames: int | None,
    timeout_ms: float = 5.0,
    device: str = "cuda:0",
    workers: int = 1,
    analytics: str = "none",
) -> dict[str, Any]:
    """Run a pipeline to the end; throughput and latency over the steady part: while every stream is
    running (model warm-up and decoder sessions opening before it, streams ending after it, left out)."""
    from edgefleet.sdk import OnnxRuntimeConfig, Pipeline

    times: list[float] = []
    lat: list[float] = []
    per_stream: dict[str, list[float]] = {}
    captured: dict[str, list[tuple[int, float, float]]] = {}

    def on_result(r: Any) -> None:
        now = time.monotonic()
        times.append(now)
        lat.append(r.latency_ms)
        per_stream.setdefault(r.stream_id, []).append(now)
        captured.setdefault(r.stream_id, []).append((r.sequence, r.timestamp, now))

    p = Pipeline(
        model,
        sources,
        device=device,
        backend=OnnxRuntimeConfig(cuda_graph=_OPTIONS["cuda_graph"]),
        max_batch=batch,
        max_frames=frames,
        batch_timeout_ms=timeout_ms,
        on_result=on_result,
        frame_upload=_OPTIONS["frame_upload"],
        infer_workers=workers,
        analytics=_stages(analytics),
        analytics_thread=not analytics.endswith("-inline"),
        analytics_process="-process" in analytics,
    )
    with (
        EngineSampler() as engines,
        CpuSampler() as cpu,
        _child_probe(analytics) as child,
        _general_wire(analytics),
        GcTimer(freeze=_OPTIONS["gc_freeze"]) as collector,
    ):
        waits = QueueWaits(p, post_queue=_OPTIONS["post_queue"])
        p.start()
        collector.started()
        t_start = time.monotonic()
        s = p.run()
        wall = time.monotonic() - t_start
    # Steady state: from the moment every stream has delivered a result (model warm, every decoder open)
    # to the moment the first stream delivered its last one (every stream still running).
    lo, hi = _steady_window(list(per_stream.values()))
    inside = [i for i, t in enumerate(times) if lo < t <= hi]
    steady = len(inside) / (hi - lo) if hi > lo and inside else 0.0
    e2e = np.asarray([lat[i] for i in inside] or lat or [0.0])
    # Each stream on its own clock (streams start a few ms apart): its delivered rate from its first to
    # its last result, and how far behind a 30 fps schedule it ended (paced streams only mean that).
    rates = [(len(ts) - 1) / (ts[-1] - ts[0]) for ts in per_stream.values() if len(ts) > 1 and ts[-1] > ts[0]]
    # Paced streams: how far behind its 30 fps schedule each stream captured its frames, while every stream
    # runs (as streams end, closing their NVDEC sessions stalls the others for tens of ms each). A file
    # source blocks when the pipeline cannot take more (nothing is dropped), so a pipeline that cannot keep
    # up shows here, growing; one that keeps up stays near 0 (latency is measured apart, above).
    slips = [
        max((t - c[0][1]) - (seq - c[0][0]) / 30.0 for seq, t, at in c if at <= hi)
        for c in captured.values()
        if len(c) > 1 and c[0][2] <= hi
    ]
    return {
        "infer_workers": p.infer_workers,
        "analytics": analytics,
        "analytics_counters": s.analytics,
        "frames": s.results,
        "slowest_stream_fps": round(min(rates), 2) if rates else 0.0,
        "max_capture_slip_behind_30fps_s": round(max(slips), 3) if slips else 0.0,
        "fps": round(steady, 1),
        "fps_incl_startup": round(s.results / wall, 1) if wall else 0.0,
        "wall_s": round(wall, 2),
        "latency_p50_ms": round(float(np.percentile(e2e, 50)), 1),
        "latency_p95_ms": round(float(np.percentile(e2e, 95)), 1),
        "copies_per_frame": round(s.copies_per_frame, 3),
        "copies": s.copies["counts"],
        "dropped": s.dropped,
        "mean_batch": round(s.mean_batch, 2),
        # batches whose analytics answer was taken after the next batch was decoded (track-process-inline)
        "overlapped_batches": p._post.overlapped if p._post is not None else None,
        "detections_per_frame": round(sum(s.detections_by_label.values()) / max(1, s.results), 2),
        "stage_ms_p50_per_batch": {k2: round(v.p50_ms, 3) for k2, v in s.stages.items()},
        "engines_steady": engines.summary(lo, hi),
        "cpu": cpu.summary(s.results),
        "gc": collector.summary(s.results, lo, hi),
        "infer_waits": waits.summary(),
        **({"analytics_child": child.figures()} if child else {}),
    }


class _Probe:
    def __init__(self, path: Path) -> None:
        self.path = path

    def figures(self) -> dict[str, Any]:
        import analytics_child_probe

        if not self.path.exists():
            return {"error": "the analytics process wrote no figures"}
        return analytics_child_probe.figures(self.path)  # type: ignore[no-any-return]


@contextlib.contextmanager
def _general_wire(analytics: str) -> Iterator[None]:
    """``track-process-copy-inline``: the analytics process sent every batch the general way (no decoder
    columns, the answer into copies), to compare with the pipeline's shortcuts in one run."""
    if "-copy" not in analytics:
        yield
        return
    from edgefleet.sdk._analytics._runner import AnalyticsRunner

    send = AnalyticsRunner.send
    AnalyticsRunner.send = lambda self, results, columns=None, *, owned=False: send(self, results)  # type: ignore[method-assign]
    try:
        yield
    finally:
        AnalyticsRunner.send = send  # type: ignore[method-assign]


@contextlib.contextmanager
def _child_probe(analytics: str) -> Iterator[_Probe | None]:
    """--child-probe, for a cell with the analytics process: that process started with its request loop
    timed (``analytics_child_probe``); its figures are there once the pipeline has stopped."""
    if not (_OPTIONS["child_probe"] and "-process" in analytics):
        yield None
        return
    import analytics_child_probe

    from edgefleet.sdk._analytics import _remote

    start, out = _remote._START, Path(tempfile.mkdtemp(prefix="child-probe-")) / "child.json"
    os.environ["PROBE_OUT"], _remote._START = str(out), analytics_child_probe._PROBE
    try:
        yield _Probe(out)
    finally:
        _remote._START = start


def bench_pipeline(
    rec: Recorder,
    models: dict[str, Path],
    clip: Path,
    cells: list[tuple[str, int, int]],
    decoders: list[str],
) -> None:
    for name, path in models.items():
        for streams, batch, _ in [(c[1], c[2], 0) for c in cells if c[0] == name]:
            runs = [
                (d, w, a, c)
                for d in decoders
                for w in _OPTIONS["workers"]
                for a in _OPTIONS["analytics"]
                for c in _OPTIONS["cuda_calls"]
            ]
            for dec, w, an, calls in runs:
                _cuda_calls(calls)
                # "none": no decoder at all, a generated 1080p pattern written into the pinned slot
                src = "synthetic:?width=1920&height=1080&fps=9999&live=0" if dec == "none" else _uri(clip, dec)
                per = 600  # the whole clip: with S NVDEC sessions opening ~55 ms apart, streams must overlap
                try:
                    r = _pipeline(path, [src] * streams, batch, per, workers=w, analytics=an)
                except Exception as exc:
                    r = {"error": f"{type(exc).__name__}: {exc}"}
                    traceback.print_exc()
                rec.add(
                    {
                        "suite": "pipeline",
                        "model": name,
                        "decode": dec,
                        "streams": streams,
                        "batch": batch,
                        "frames_per_stream": per,
                        "cuda_calls": calls,
                        **r,
                    }
                )


def _cuda_calls(setting: str) -> None:
    """``held``: short CUDA enqueues keep the GIL (the default); ``released``: through cuda-python."""
    from edgefleet.sdk._cuda import _enqueue

    _enqueue.ENABLED = setting == "held"


def bench_density(
    rec: Recorder, model: Path, name: str, clip: Path, streams: list[int], decoders: list[str], seconds: float
) -> None:
    runs = [(d, s, w, a) for d in decoders for s in streams for w in _OPTIONS["workers"] for a in _OPTIONS["analytics"]]
    for dec, s, w, an in runs:
        base = _uri(clip, dec)
        src = f"{base}?realtime=1" if not dec.startswith("nvdec") else base
        frames = int(30 * seconds)
        try:
            if dec.startswith("nvdec"):
                from edgefleet.sdk._sources import parse_source

                specs = []
                for i in range(s):
                    sp = parse_source(base, i)
                    specs.append(type(sp)(**{**sp.__dict__, "realtime": True}))
                r = _pipeline(model, specs, min(s, 32), frames, workers=w, analytics=an)  # type: ignore[arg-type]
            else:
                r = _pipeline(model, [src] * s, min(s, 32), frames, workers=w, analytics=an)
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
        # sustained: every frame delivered, none dropped, p95 end-to-end <= 100 ms, and every stream captured
        # every frame within 100 ms of its 30 fps schedule (file sources block rather than drop, so a
        # pipeline that cannot keep up shows as streams slipping behind, not as latency)
        ok = (
            "error" not in r
            and r["latency_p95_ms"] <= 100
            and r["dropped"] == 0
            and r["frames"] == s * frames
            and r["max_capture_slip_behind_30fps_s"] <= 0.1
        )
        rec.add(
            {
                "suite": "density",
                "model": name,
                "decode": dec,
                "streams": s,
                "paced_fps_per_stream": 30,
                "sustained": ok,
                **r,
            }
        )


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, default=Path("/tmp/edgefleet-bench-models"))
    ap.add_argument("--clip", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--suite", default="raw,naive,pipeline,density")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--only", default="", help="comma list of model names to measure (default: all)")
    ap.add_argument("--streams", default="1,4,16,64", help="stream counts of the pipeline suite")
    ap.add_argument("--density-streams", default="16,32,48,64")
    ap.add_argument("--decoders", default="cpu,nvdec", help="of the pipeline and density suites")
    ap.add_argument("--cuda-graph", action="store_true", help="pipelines replay ONNX Runtime runs as CUDA graphs")
    ap.add_argument(
        "--host-frames",
        choices=["upload", "in_place"],
        default="in_place",
        help="CPU-decoded frames on a discrete GPU: read in place by the kernel (default) or uploaded whole",
    )
    ap.add_argument("--infer-workers", default="1", help="comma list: pipeline/density cells run once per count")
    ap.add_argument(
        "--analytics",
        default="none",
        help=f"comma list of {', '.join(ANALYTICS)}: cells run once per setting",
    )
    ap.add_argument(
        "--cuda-calls",
        default="held",
        help="comma list of held, released: pipeline cells run once per setting (short CUDA enqueues "
        "keep the GIL, or release it through cuda-python)",
    )
    ap.add_argument(
        "--post-queue",
        type=int,
        default=0,
        help="inferred batches that may wait for the result thread (0: the pipeline's own, 2)",
    )
    ap.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() right after each pipeline cell's start (what it holds then is never collected)",
    )
    ap.add_argument(
        "--child-probe",
        action="store_true",
        help="the analytics process times its request loop in its own CPU time (analytics_child_probe.py): "
        "each cell with it gets its parts' CPU ms per batch",
    )
    ap.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="seconds: sys.setswitchinterval for the whole run (CPython's default is 0.005)",
    )
    args = ap.parse_args(argv)
    if args.switch_interval is not None:
        if not 0 < args.switch_interval <= 1:
            ap.error("--switch-interval must be in (0, 1] seconds")
        sys.setswitchinterval(args.switch_interval)
    _OPTIONS["workers"] = [int(x) for x in args.infer_workers.split(",")]
    _OPTIONS["frame_upload"] = args.host_frames == "upload"
    _OPTIONS["cuda_graph"] = args.cuda_graph
    _OPTIONS["analytics"] = args.analytics.split(",")
    _OPTIONS["cuda_calls"] = args.cuda_calls.split(",")
    _OPTIONS["child_probe"] = args.child_probe
    _OPTIONS["gc_freeze"] = args.gc_freeze
    _OPTIONS["post_queue"] = args.post_queue
    if not set(_OPTIONS["cuda_calls"]) <= {"held", "released"}:
        ap.error("--cuda-calls takes a comma list of held, released")
    if not set(_OPTIONS["analytics"]) <= set(ANALYTICS):
        ap.error(f"--analytics takes a comma list of {', '.join(ANALYTICS)}")
    rec = Recorder(args.out, argv)
    suites = args.suite.split(",")
    names = ["yolov8n-fp32", "yolov8n-fp16", "resnet50-fp32", "resnet50-fp16", "nanodet-fp32"]
    models = _model_dirs(args.models, [n for n in names if not args.only or n in args.only.split(",")])
    stream_counts = [int(x) for x in args.streams.split(",")]
    density_counts = [int(x) for x in args.density_streams.split(",")]
    rec.doc["models"] = {k: str(v) for k, v in models.items()}
    rec.doc["host_frames"] = args.host_frames
    rec.doc["cuda_graph"] = args.cuda_graph
    rec.doc["switch_interval_s"] = sys.getswitchinterval()
    t0 = time.perf_counter()
    for suite in suites:
        try:
            if suite == "raw":
                bench_raw(rec, models, [1, 8, 32], args.seconds)
            elif suite == "naive":
                bench_naive(
                    rec,
                    {k: v for k, v in models.items() if k.endswith("fp32") or k.endswith("fp16")},
                    args.clip,
                    [1, 8],
                    96,
                )
            elif suite == "pipeline":
                cells = [(m, s, 8 if s == 1 else 32) for m in ("yolov8n-fp16", "yolov8n-fp32") for s in stream_counts]
                extra = [("nanodet-fp32", 16, 32), ("resnet50-fp16", 16, 32), ("resnet50-fp16", 64, 32)]
                if _OPTIONS["analytics"] != ["none"] or "nanodet-fp32" in args.only.split(","):
                    extra.append(("nanodet-fp32", 64, 32))  # the analytics cell, also asked for by name
                cells += [c for c in extra if c[1] in stream_counts]
                bench_pipeline(
                    rec,
                    {k: v for k, v in models.items() if any(c[0] == k for c in cells)},
                    args.clip,
                    cells,
                    args.decoders.split(","),
                )
            elif suite == "nodecode":  # the pipeline where decode is not the limit: generated frames
                # (the random-weight detector fires ~100 boxes a frame on colour bars: NMS on garbage, left out)
                cells = [(m, 16, 32) for m in ("nanodet-fp32", "resnet50-fp16")]
                bench_pipeline(
                    rec,
                    {k: v for k, v in models.items() if any(c[0] == k for c in cells)},
                    args.clip,
                    cells,
                    ["none"],
                )
            elif suite == "decode":
                bench_decode(rec, args.clip, stream_counts, args.decoders.split(","), 9600)
            elif suite == "density" and (dm := next((m for m in DENSITY_MODELS if m in models), None)):
                bench_density(
                    rec,
                    models[dm],
                    dm,
                    args.clip,
                    density_counts,
                    args.decoders.split(","),
                    10.0,
                )
        except Exception:
            traceback.print_exc()
            rec.doc.setdefault("errors", []).append(f"{suite}: {traceback.format_exc(limit=3)}")
        rec.doc.setdefault("suite_seconds", {})[suite] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        rec.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
