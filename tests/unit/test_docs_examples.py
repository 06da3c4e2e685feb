"""The "Writing a plugin" examples in docs/sdk.md run as they stand, from the repository's root, each
in a fresh interpreter, and print what the docs say they do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# heading of the example -> what its output must contain
EXPECTED = {
    "A source": "('g2', 1), ('s0', 0), ('s0', 1), ('s0', 2)]",
    "A backend": "4 results",
    "A decoder": "['",
    "A sink": "s0,2,",
    "An analytics stage": "{'label-counter': {'person_total': ",
}


def _examples() -> dict[str, str]:
    text = (REPO / "docs" / "sdk.md").read_text(encoding="utf-8")
    section = text.split("## Writing a plugin", 1)[1].split("\n## ", 1)[0]
    out = {}
    for part in section.split("\n### ")[1:]:
        heading, _, body = part.partition("\n")
        blocks = re.findall(r"```python\n(.*?)```", body, re.S)
        if blocks:
            out[heading.strip()] = "\n".join(blocks)
    return out


def test_every_kind_has_an_example() -> None:
    assert set(_examples()) == set(EXPECTED)


@pytest.mark.parametrize("heading", sorted(EXPECTED))
def test_the_example_runs(heading: str) -> None:
    code = _examples()[heading]
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0, res.stderr
    assert EXPECTED[heading] in res.stdout, res.stdout


def test_the_kit_example_runs() -> None:
    text = (REPO / "docs" / "sdk.md").read_text(encoding="utf-8")
    section = text.split("## The kit", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
