"""Decoding in worker processes (``decode_processes: N``): a batch's outputs are decoded by a process of
its own, which has its own GIL.

Why: on a GPU the pipeline's threads (one per source, batch, inference, post) share one GIL. A decoder's
numpy calls release it and must take it back each time, waiting behind the source threads: on an H200 with
16 NVDEC streams, NanoDet's decoding (a few ms of work a batch) took 13-20 ms of the post thread. In a
worker process the same work runs uncontended; the pipeline's side is one pickling of the outputs (on the
inference worker, right after inference) and one unpickling of the results (on the post thread), each a
single call that holds the GIL throughout.

The decoder is rebuilt in the worker from the model's :class:`DecodeContext` and the registered
factory, found again by its module and name (the built-in decoders, or a custom one defined at module
level of an importable module). A decoder that cannot be found that way (defined in ``__main__`` or
inside a function) keeps decoding on the post thread, with a warning.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from ._decoders import DecodeContext, Decoded, Decoder
from ._decoders._base import factory_for
from ._errors import EdgefleetError
from ._preprocess import Transform

__all__ = ["DecodePool", "portable_factory"]

_log = logging.getLogger(__name__)

# In a worker process: decoders built so far, by key (a model version's decoder; the last few kept).
_DECODERS: OrderedDict[str, Decoder] = OrderedDict()
_KEEP = 8


def portable_factory(ctx: DecodeContext) -> tuple[str, str] | None:
    """(module, qualified name) of the factory of ``ctx``'s decoder, if a fresh process can import it."""
    factory = factory_for(ctx.manifest.decoder.type)
    if factory is None:
        return None
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return (module, name) if found is factory else None


def _decode(
    key: str, where: tuple[str, str], ctx: DecodeContext, outputs: dict[str, Any], transforms: Sequence[Transform]
) -> list[Decoded]:
    """Runs in a worker process."""
    decoder = _DECODERS.get(key)
    if decoder is None:
        factory: Any = importlib.import_module(where[0])
        for part in where[1].split("."):
            factory = getattr(factory, part)
        decoder = _DECODERS[key] = factory(ctx)
        while len(_DECODERS) > _KEEP:
            _DECODERS.popitem(last=False)
    else:
        _DECODERS.move_to_end(key)
    return decoder.decode(outputs, transforms)


def _ready() -> int:
    import numpy  # noqa: F401  (imported once here rather than on the first batch)

    return os.getpid()


class DecodePool:
    """``processes`` worker processes decoding batches; :meth:`submit` returns a future of the decoded
    list. Started from a fork server where there is one (a clean single-threaded parent: this process
    has CUDA and threads), else spawned."""

    def __init__(self, processes: int) -> None:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        self.processes = processes
        self._pool = ProcessPoolExecutor(max_workers=processes, mp_context=context)
        # id(ctx) -> (ctx, key, factory): the context is kept so its id is not reused while known
        self._keys: dict[int, tuple[DecodeContext, str, tuple[str, str] | None]] = {}
        self._lock = threading.Lock()
        self._count = 0

    def start(self, timeout: float = 60.0) -> list[int]:
        """Start every worker now (not on the first batch); their process ids."""
        try:
            futures = [self._pool.submit(_ready) for _ in range(self.processes)]
            return [f.result(timeout) for f in futures]
        except Exception as exc:
            self._pool.shutdown(wait=False, cancel_futures=True)
            raise EdgefleetError(f"cannot start {self.processes} decode processes: {exc}") from exc

    def _key(self, ctx: DecodeContext) -> tuple[str, tuple[str, str] | None]:
        with self._lock:
            known = self._keys.get(id(ctx))
            if known is None:
                self._count += 1
                where = portable_factory(ctx)
                if where is None:
                    _log.warning(
                        "%s: decoder %r cannot be rebuilt in a decode process (define its factory at module "
                        "level of an importable module): it decodes on the post thread",
                        ctx.manifest.ref,
                        ctx.manifest.decoder.type,
                    )
                known = self._keys[id(ctx)] = (ctx, f"{ctx.manifest.ref}#{self._count}", where)
            return known[1], known[2]

    def submit(
        self, ctx: DecodeContext, outputs: dict[str, Any], transforms: Sequence[Transform]
    ) -> Future[list[Decoded]] | None:
        """None when this decoder cannot run in a worker (decode it in this process)."""
        key, where = self._key(ctx)
        if where is None:
            return None
        return self._pool.submit(_decode, key, where, ctx, outputs, list(transforms))

    def forget(self, ctx: DecodeContext) -> None:
        """A model version was closed: its key will not be used again."""
        with self._lock:
            self._keys.pop(id(ctx), None)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
