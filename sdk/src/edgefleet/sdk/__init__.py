"""edgefleet SDK: streaming video-analytics pipelines on ONNX Runtime and TensorRT.

Example::

    from edgefleet.sdk import Pipeline

    with Pipeline("models/nanodet-m", ["models/media/vtest-300.mp4"], max_frames=10) as pipeline:
        for result in pipeline.results():
            print(result.stream_id, result.sequence, [(d.label, round(d.score, 2)) for d in result.detections])

Only the names in ``__init__.pyi`` are public; everything in ``_``-modules may change without notice.
They load on first use (PEP 562), so ``import edgefleet.sdk`` (and ``edgefleet --help``) does not pay
for pydantic, numpy and every submodule up front.
"""

from __future__ import annotations

from ._lazy import attach_stub
from ._version import distribution_version

__version__ = distribution_version("edgefleet-sdk")

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
