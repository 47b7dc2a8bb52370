#!/usr/bin/env python3
"""Python peers for ``firehose bench shm`` (not run on their own).

- ``firehose SOCKET N``: reads N items from an fhshmsink with ``firehose_shm`` (each a
  zero-copy numpy view, released at once), then closes.
- ``spdl SIZE N``: SPDL's ``SharedMemorySegmentPool``: a producer subprocess
  (``spdl.pipeline.iterate_in_subprocess``) yields N numpy arrays of SIZE bytes (one
  copy each into the pool's segments, as fhshmsink's copy path), this process reads
  each as a zero-copy view and drops it.

Both print ``wall=S consumer_cpu=S [producer_cpu=S] items=N``: seconds from the first
item to the last and CPU (user + system, all threads) over that span, measured inside
each process, so that interpreter start-up and imports are left out.
"""

import resource
import sys
import time


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def firehose(path, n):
    from firehose_shm import Consumer

    got = 0
    with Consumer(path, timeout=30) as c:
        for item in c:
            if got == 0:
                t0, c0 = time.monotonic(), cpu()
            item.release()
            got += 1
            if got == n:
                break
    print("wall=%.6f consumer_cpu=%.6f items=%d" % (time.monotonic() - t0, cpu() - c0, got))


def _produce(size, n):
    import numpy as np

    a = np.zeros(size, np.uint8)
    c0 = cpu()
    for _ in range(n):
        yield {"data": a}
    yield {"producer_cpu": cpu() - c0}


def spdl(size, n):
    import functools

    from spdl.pipeline import SharedMemorySegmentPool, iterate_in_subprocess

    pool = SharedMemorySegmentPool(segment_size=size + 4096, count=16)
    it = iterate_in_subprocess(functools.partial(_produce, size, n), arena=pool, buffer_size=8)
    got, producer = 0, None
    for item in it:
        if "producer_cpu" in item:
            producer = item["producer_cpu"]
            continue
        if got == 0:
            t0, c0 = time.monotonic(), cpu()
        got += 1
        del item
    print("wall=%.6f consumer_cpu=%.6f producer_cpu=%.6f items=%d" % (time.monotonic() - t0, cpu() - c0, producer, got))


if __name__ == "__main__":
    if sys.argv[1] == "firehose":
        firehose(sys.argv[2], int(sys.argv[3]))
    else:
        spdl(int(sys.argv[2]), int(sys.argv[3]))
