"""An entry whose library is not installed: it drops out, and asking for it names the extra."""

from __future__ import annotations

import edgefleet_example_missing_lib  # type: ignore[import-not-found]  # noqa: F401  # the point of the example


def register() -> None:  # never reached
    raise AssertionError("edgefleet_example_missing_lib is installed?")
