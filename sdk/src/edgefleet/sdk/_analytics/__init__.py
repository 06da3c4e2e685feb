"""Analytics, the ``analytics`` kind of the extension seam: stages between decoding and the sinks.

Built-ins: ``track`` (ByteTrack over every stream; needs lap, the ``analytics`` extra) and ``zones``
(zones and lines over tracked objects). Applications add theirs with ``register_analytics``; installed
distributions through the ``edgefleet.analytics`` entry-point group (see ``_registry``). A pipeline config
lists them as ``analytics: [{type: <key>, ...}, ...]``, applied in that order.
"""

from __future__ import annotations

from ._base import ANALYTICS, AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange, register_analytics
from ._regions import Line, Zone, ZonesConfig, ZonesStage
from ._track import TrackConfig, TrackStage

ANALYTICS.register("track", TrackConfig, TrackStage, extra="analytics")
ANALYTICS.register("zones", ZonesConfig, ZonesStage)

__all__ = [
    "ANALYTICS",
    "AnalyticsConfig",
    "AnalyticsContext",
    "AnalyticsStage",
    "Line",
    "ModelChange",
    "TrackConfig",
    "TrackStage",
    "Zone",
    "ZonesConfig",
    "ZonesStage",
    "register_analytics",
]
