"""Read ahead in a background thread, so waiting for the database overlaps
with encoding and producing (psycopg2 releases the GIL while it waits)."""

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(chunks: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Iterate chunks, computed by a worker thread at most depth items ahead.

    The worker is the only thread that advances chunks (and closes it); an
    exception it raises is re-raised here. Closing this generator stops and
    joins the worker, so memory stays bounded by depth chunks.
    """
    items: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consuming thread
            put(exc)
        finally:
            chunks.close()  # type: ignore[attr-defined]

    worker = threading.Thread(target=work, name="prefetch", daemon=True)
    worker.start()
    try:
        while (item := items.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()
