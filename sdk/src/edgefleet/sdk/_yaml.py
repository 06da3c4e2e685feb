"""The one YAML loader of config files (pipeline configs, agent.yaml, the controller's settings): a file
read as UTF-8, a mapping at the top level, and every problem as one line naming the file, raised as the
caller's error class; pydantic errors formatted by :func:`~._validation.format_validation_error`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ._errors import ConfigError
from ._validation import format_validation_error

__all__ = ["load_yaml_mapping", "validate_mapping", "yaml_problem"]

M = TypeVar("M", bound=BaseModel)


def load_yaml_mapping(path: Path, error: type[Exception] = ConfigError) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path``; ``error("<path>: ...")`` when the file is missing,
    unreadable, not UTF-8, not YAML, or not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a YAML file (not UTF-8 text)") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: {yaml_problem(exc)}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level")
    return data


def validate_mapping(model: type[M], data: dict[str, Any], source: str, error: type[Exception] = ConfigError) -> M:
    """``model`` validated from ``data``; a ValidationError becomes ``error`` naming ``source`` and every field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_validation_error(exc, source)) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: ``not valid YAML at line 3, column 5: found character '\\t' ...``
    (its own text spans several lines, with a drawing of the spot)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML{where}: {problem}"
