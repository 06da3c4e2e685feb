"""``edgefleet bench``: the same model and clip measured three ways, each in a fresh process.

(a) ``raw``: the backend alone on preprocessed tensors (the ceiling);
(b) ``naive``: one thread, OpenCV read → resize → normalise → ``session.run`` on host arrays → decode;
(c) ``pipeline``: the SDK pipeline end to end (decode, batcher, preprocess, inference, decode).

Each mode prints one JSON object; the parent adds the ratios. Run ``python -m edgefleet.sdk._bench MODE``
to measure one mode alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["run_bench"]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _read_frames(source: Path, n: int) -> list[Any]:
    import cv2

    cap = cv2.VideoCapture(str(source))
    frames: list[Any] = []
    while len(frames) < n:
        ok, img = cap.read()
        if not ok:
            if not frames:
                raise SystemExit(f"{source}: no frames")
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            continue
        frames.append(img)
    cap.release()
    return frames


def _mode_raw(model: Path, source: Path, frames: int, batch: int, device: str) -> dict[str, Any]:
    """The backend alone on preprocessed tensors, configured as the pipeline would configure it (the same
    number of concurrent inference workers and threads per run): the ceiling the pipeline can reach."""
    import threading

    from ._config import PipelineConfig
    from ._model import load_model
    from ._package import load_package
    from ._pipeline import _backend_for_workers, _default_workers

    cfg = PipelineConfig(model=model, sources=(str(source),), device=device, max_batch=batch)
    workers = _default_workers(cfg)
    m = load_model(
        load_package(model),
        _backend_for_workers(cfg, workers),
        device=device,
        max_batch=batch,
        workers=workers,
    )
    if not m.backend.concurrent_infer:
        workers = 1
    img = _read_frames(source, 1)[0]
    bufs = []
    for _ in range(workers):
        buf = m.acquire_buffer(1.0)
        if buf is None:
            raise SystemExit("no input buffer")
        for i in range(m.max_batch):
            m.preprocess(img, buf, i)
        m.preprocess.finish(buf, m.max_batch)
        m.backend.infer(buf, m.max_batch)
        bufs.append(buf)
    iters = max(1, frames // (m.max_batch * workers))

    def run(buf: Any) -> None:
        for _ in range(iters):
            m.backend.infer(buf, m.max_batch)

    threads = [threading.Thread(target=run, args=(b,)) for b in bufs]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    m.close()
    n = iters * m.max_batch * workers
    return {"frames": n, "seconds": dt, "fps": n / dt, "batch": m.max_batch, "infer_workers": workers}


def _mode_naive(model: Path, source: Path, frames: int, batch: int, device: str) -> dict[str, Any]:
    import cv2
    import numpy as np
    import onnxruntime as ort

    from ._decoders import DecodeContext, build_decoder
    from ._package import load_package
    from ._transform import compute_transform

    pkg = load_package(model)
    spec = pkg.manifest.input
    sess = ort.InferenceSession(str(pkg.model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    dec = build_decoder(DecodeContext(pkg.manifest.decoder.params(), pkg.manifest, pkg.labels, tuple(names)))
    mean = np.array(spec.mean, np.float32)
    std = np.array(spec.std, np.float32)
    cap = cv2.VideoCapture(str(source))
    n = 0
    t0 = time.perf_counter()
    while n < frames:
        ok, img = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            continue
        t = compute_transform(img.shape[1], img.shape[0], spec)
        rw, rh = t.resized
        canvas = np.full((spec.height, spec.width, 3), spec.pad_value, np.uint8)
        canvas[t.pad_y : t.pad_y + rh, t.pad_x : t.pad_x + rw] = cv2.resize(img, (rw, rh))
        if spec.color == "RGB":
            canvas = canvas[:, :, ::-1]
        x = (canvas.astype(np.float32) - mean) / std
        x = (x.transpose(2, 0, 1) if spec.layout == "NCHW" else x)[None]  # the manifest's layout
        out = dict(zip(names, sess.run(names, {spec.name: np.ascontiguousarray(x)}), strict=True))
        dec.decode(out, [t])
        n += 1
    dt = time.perf_counter() - t0
    return {"frames": n, "seconds": dt, "fps": n / dt, "batch": 1}


def _mode_pipeline(
    model: Path, source: Path, frames: int, batch: int, device: str, streams: int, workers: int | None = None
) -> dict[str, Any]:
    from ._pipeline import Pipeline

    per_stream = max(1, frames // streams)
    sources = [f"s{i}={source}?loop=1" for i in range(streams)]
    p = Pipeline(
        model,
        sources,
        device=device,
        max_batch=batch,
        max_frames=per_stream,
        on_result=lambda r: None,
        infer_workers=workers,
    )
    p.start()
    t0 = time.perf_counter()
    stats = p.run()
    dt = time.perf_counter() - t0
    return {
        "frames": stats.results,
        "seconds": dt,
        "fps": stats.results / dt,
        "batch": batch,
        "infer_workers": p.infer_workers,
        "intra_op_threads": getattr(p.backend_config, "intra_op_threads", None),
        "mean_batch": stats.mean_batch,
        "streams": streams,
        "dropped": stats.dropped,
        "copies_per_frame": stats.copies_per_frame,
        "stages_ms": {
            k: {"p50": v.p50_ms, "p95": v.p95_ms, "p99": v.p99_ms} for k, v in stats.stages.items() if v.items
        },
    }


def _child(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m edgefleet.sdk._bench")
    ap.add_argument("mode", choices=["raw", "naive", "pipeline"])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--source", type=Path, required=True)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    if a.mode == "raw":
        res = _mode_raw(a.model, a.source, a.frames, a.batch, a.device)
    elif a.mode == "naive":
        res = _mode_naive(a.model, a.source, a.frames, a.batch, a.device)
    else:
        res = _mode_pipeline(a.model, a.source, a.frames, a.batch, a.device, a.streams, a.workers)
    res["mode"] = a.mode
    res["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    print(json.dumps(res))


def _measure(name: str, mode: str, model: Path, source: Path, opts: dict[str, Any], extra: list[str]) -> dict[str, Any]:
    """One mode in a fresh process; its JSON line."""
    cmd = [sys.executable, "-m", "edgefleet.sdk._bench", mode, "--model", str(model), "--source", str(source)]
    for key in ("frames", "batch", "streams", "device"):
        value = opts[key] if key != "batch" or mode != "naive" else 1
        cmd += [f"--{key}", str(value)]
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        from ._errors import EdgefleetError

        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        said = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
        raise EdgefleetError(f"bench mode {name} failed: {(said or lines)[-1].strip()}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_bench(
    *,
    model: Path,
    source: Path,
    frames: int,
    batch: int,
    streams: int,
    device: str,
    as_json: bool,
    out: Path | None,
    compare: Path | None = None,
) -> dict[str, Any]:
    """The modes for ``model`` and, with ``compare`` (another version of it, e.g. its INT8 one from
    ``models quantize``), its raw, naive and pipeline modes too, in the same run; ratios side by side."""
    from ._errors import ConfigError, SourceError
    from ._package import load_package

    load_package(model)  # clear errors before spending time
    other = load_package(compare) if compare is not None else None
    if not source.is_file():
        raise SourceError(f"{source}: no such video file")
    for name, value in (("--frames", frames), ("--batch", batch), ("--streams", streams)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    if device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"--device must be cpu or cuda:N, got {device!r}")
    if out is not None and out.is_dir():
        raise ConfigError(f"--out {out}: is a folder; give a file name such as {out / 'bench.json'}")
    opts = {"frames": frames, "batch": batch, "streams": streams, "device": device}
    results: dict[str, Any] = {}
    # (name, mode, model, extra arguments); the single-worker pipeline shows what the parallel workers add
    runs: list[tuple[str, str, Path, list[str]]] = [
        ("raw", "raw", model, []),
        ("naive", "naive", model, []),
        ("pipeline", "pipeline", model, []),
        ("pipeline_one_worker", "pipeline", model, ["--workers", "1"]),
    ]
    if compare is not None:
        runs += [(f"compare_{m}", m, compare, []) for m in ("raw", "naive", "pipeline")]
    for name, mode, pkg, extra in runs:
        if not as_json:
            print(f"measuring {name} ...", file=sys.stderr)
        results[name] = _measure(name, mode, pkg, source, opts, extra)
    command = ["edgefleet", "bench", "--model", str(model), "--source", str(source), "--frames", str(frames)]
    command += ["--batch", str(batch), "--streams", str(streams), "--device", device]
    if compare is not None:
        command += ["--compare", str(compare)]
    fps = {k: v["fps"] for k, v in results.items()}
    ratios = {
        "pipeline_over_naive": fps["pipeline"] / fps["naive"],
        "pipeline_over_raw": fps["pipeline"] / fps["raw"],
        "pipeline_one_worker_over_naive": fps["pipeline_one_worker"] / fps["naive"],
    }
    report: dict[str, Any] = {
        "command": " ".join(command),
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cores": _cores(),
        },
        "results": results,
        "ratios": ratios,
    }
    if other is not None:
        ratios.update(
            compare_pipeline_over_naive=fps["compare_pipeline"] / fps["naive"],
            compare_pipeline_over_pipeline=fps["compare_pipeline"] / fps["pipeline"],
            compare_naive_over_naive=fps["compare_naive"] / fps["naive"],
            compare_raw_over_raw=fps["compare_raw"] / fps["raw"],
        )
        q = other.manifest.quantization
        report["compare"] = {
            "ref": other.ref,
            "quantization": q.model_dump(mode="json", exclude_none=True) if q is not None else None,
        }
    report["load_average_at_end"] = _loadavg()
    text = json.dumps(report, indent=2)
    print(text, flush=True)  # first: a file that cannot be written must not lose the figures
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
    return report


def _loadavg() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    from pydantic import ValidationError

    from ._errors import EdgefleetError
    from ._validation import format_validation_error

    try:
        _child(sys.argv[1:])
    except EdgefleetError as exc:  # one line the parent shows as is
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValidationError as exc:
        print(f"error: {format_validation_error(exc, 'arguments')}", file=sys.stderr)
        raise SystemExit(1) from None
