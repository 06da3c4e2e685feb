"""How long a pipeline's inference loop waits on its two queues in a benchmark cell: for the next formed
batch (``_q_infer``, the batching thread behind) and for room to hand a batch on (``_q_post``, the result
thread behind), in seconds over the whole cell and per batch. ``post_queue`` (0: the pipeline's own, 2)
sets how many inferred batches may wait for the result thread.

    waits = QueueWaits(pipeline, post_queue=0)   # before pipeline.start()
    ...
    waits.summary()
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["QueueWaits"]


class QueueWaits:
    def __init__(self, pipeline: Any, *, post_queue: int = 0) -> None:
        flow, q_infer, q_post = pipeline._flow, pipeline._q_infer, pipeline._q_post
        if post_queue:
            q_post.maxsize = post_queue
        self.post_queue = q_post.maxsize
        self.get_s = self.put_s = 0.0
        self.batches = 0
        get, put = flow.get, flow.put

        def timed_get(q: Any) -> Any:
            if q is not q_infer:
                return get(q)
            t0 = time.perf_counter()
            try:
                return get(q)
            finally:
                self.get_s += time.perf_counter() - t0

        def timed_put(q: Any, item: Any) -> bool:
            if q is not q_post:
                return put(q, item)
            t0 = time.perf_counter()
            try:
                return put(q, item)
            finally:
                self.put_s += time.perf_counter() - t0
                self.batches += 1

        flow.get, flow.put = timed_get, timed_put  # the instance's: only this pipeline's threads see them

    def summary(self) -> dict[str, Any]:
        n = max(1, self.batches)
        return {
            "post_queue": self.post_queue,
            "batches": self.batches,
            "wait_for_batch_s": round(self.get_s, 3),
            "wait_for_result_thread_s": round(self.put_s, 3),
            "ms_per_batch": {
                "for_batch": round(self.get_s / n * 1e3, 3),
                "for_result_thread": round(self.put_s / n * 1e3, 3),
            },
        }
