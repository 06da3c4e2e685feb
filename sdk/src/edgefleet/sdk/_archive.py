"""Checks on a package archive before a byte of it is unpacked: only regular files and folders, no
absolute or ``..`` paths, bounded member count, bounded total size (tar/gzip bombs) and room on disk.

``load_package`` runs it on every tar before extracting (with tarfile's ``data`` filter as a second
line); the agent's model store and the controller's registry call it first, against their own staging
folders. Everything is decided from the headers alone, so a bomb is refused without being inflated."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path, PurePosixPath

from ._errors import IntegrityError

__all__ = ["MAX_MEMBERS", "check_archive"]

MAX_MEMBERS = 10_000
MAX_RATIO = 100  # unpacked bytes per archive byte beyond the floor below
RATIO_FLOOR = 256 << 20
MAX_TOTAL = 16 << 30


def check_archive(
    path: Path,
    *,
    unpack_to: Path | None = None,
    max_total: int = MAX_TOTAL,
    max_members: int = MAX_MEMBERS,
) -> int:
    """Raise IntegrityError naming the member at fault; returns the unpacked size the headers declare.

    Example::

        check_archive(Path("nanodet-m-1.0.0.tar"), unpack_to=Path("/var/lib/edgefleet/staging"))
    """
    limit = min(max_total, max(RATIO_FLOOR, path.stat().st_size * MAX_RATIO))
    total = 0
    try:
        with tarfile.open(path) as tar:
            for count, m in enumerate(tar, start=1):
                if count > max_members:
                    raise IntegrityError(f"archive has more than {max_members} members (a tar bomb?)")
                p = PurePosixPath(m.name)
                if p.is_absolute() or ".." in p.parts or "\\" in m.name or "\0" in m.name:
                    raise IntegrityError(f"archive member {m.name!r} points outside the package")
                if not (m.isfile() or m.isdir()):
                    kind = "link" if (m.issym() or m.islnk()) else "special file"
                    raise IntegrityError(f"archive member {m.name!r} is a {kind}; packages hold regular files")
                total += m.size
                if total > limit:
                    raise IntegrityError(
                        f"archive unpacks to more than {limit} bytes (at {m.name!r}): too large or a bomb"
                    )
    except tarfile.TarError as exc:
        raise IntegrityError(f"not a readable tar archive: {exc}") from None
    except (EOFError, OSError, ValueError) as exc:  # truncated or corrupt gzip stream
        raise IntegrityError(f"not a readable tar archive: {exc}") from None
    if unpack_to is not None:
        free = shutil.disk_usage(unpack_to).free
        if total > free:
            raise IntegrityError(f"not enough disk space to unpack: {total} bytes needed, {free} free")
    return total
