"""Analytics, the ``analytics`` kind of the extension seam: stages between decoding and the sinks.

No built-ins yet. Applications add theirs with ``register_analytics``; installed distributions through
the ``edgefleet.analytics`` entry-point group (see ``_registry``). A pipeline config lists them as
``analytics: [{type: <key>, ...}, ...]``, applied in that order.
"""

from __future__ import annotations

from ._base import ANALYTICS, AnalyticsConfig, AnalyticsContext, AnalyticsStage, ModelChange, register_analytics

__all__ = [
    "ANALYTICS",
    "AnalyticsConfig",
    "AnalyticsContext",
    "AnalyticsStage",
    "ModelChange",
    "register_analytics",
]
