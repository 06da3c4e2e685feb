"""Frame sources, the ``source`` kind of the extension seam: the registry, and the built-ins registered here.

Each kind is one entry: its config (``_configs``, with the URI form that maps source strings to it) and
a factory that imports its implementation when a source is built. Applications add kinds with
``register_source``; installed distributions through the ``edgefleet.sources`` entry-point group (see
``_registry`` of the SDK). A pipeline takes source strings (``parse_source``) and config mappings
(``{type: network, url: ..., id: cam1}``) alike.
"""

from __future__ import annotations

from typing import Any

from ._base import Source, SourceConfig, SourceDisconnected, SourceSpec, SourceUnavailable
from ._configs import (
    FILE,
    GSTREAMER,
    IMAGES,
    NETWORK,
    NVDEC,
    SYNTHETIC,
    USB,
    FileConfig,
    GStreamerConfig,
    ImagesConfig,
    NetworkConfig,
    NvdecConfig,
    SyntheticConfig,
    UsbConfig,
)
from ._registry import SOURCES, create_source, parse_source, register_source

__all__ = [
    "SOURCES",
    "Source",
    "SourceConfig",
    "SourceDisconnected",
    "SourceSpec",
    "SourceUnavailable",
    "create_source",
    "parse_source",
    "register_source",
]


def _opencv(config: Any, spec: SourceSpec) -> Source:
    from ._opencv import OpenCVSource

    return OpenCVSource(spec)


def _images(config: Any, spec: SourceSpec) -> Source:
    from ._images import ImageFolderSource

    return ImageFolderSource(spec)


def _gstreamer(config: Any, spec: SourceSpec) -> Source:
    from ._gstreamer import GStreamerSource

    return GStreamerSource(spec)


def _synthetic(config: Any, spec: SourceSpec) -> Source:
    from ._synthetic import SyntheticSource

    return SyntheticSource(spec)


def _nvdec(config: Any, spec: SourceSpec) -> Source:
    from ._nvdec import NvdecSource

    return NvdecSource(spec)


# Prefixes are matched first, whatever the order; predicates in this order, so file, the fallback that
# takes any path, comes last.
SOURCES.register("gstreamer", GStreamerConfig, _gstreamer, options={"uri": GSTREAMER, "order": 0})
SOURCES.register("network", NetworkConfig, _opencv, extra="video", options={"uri": NETWORK, "order": 1})
SOURCES.register("nvdec", NvdecConfig, _nvdec, extra="nvdec", options={"uri": NVDEC, "order": 2})
SOURCES.register("synthetic", SyntheticConfig, _synthetic, options={"uri": SYNTHETIC, "order": 3})
SOURCES.register("usb", UsbConfig, _opencv, extra="video", options={"uri": USB, "order": 4})
SOURCES.register("images", ImagesConfig, _images, extra="video", options={"uri": IMAGES, "order": 5})
SOURCES.register("file", FileConfig, _opencv, extra="video", options={"uri": FILE, "order": 6})
