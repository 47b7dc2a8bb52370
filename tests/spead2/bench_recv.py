#!/usr/bin/env python3
"""spead2's own receiver for `firehose bench spead`, in its fast configuration: one
thread, a memory pool sized to the heaps, a socket buffer of --buffer bytes, and a
Python loop that only counts what arrives.

    bench_recv.py --heap-size 1048576 [--bind 127.0.0.1] [--port 0] [--buffer 33554432]
                  [--timeout 60]

Protocol (the same as `firehose bench-recv`, see pipelines/src/bench/child.rs), one line
each on stdout:
    ready port=P                    bound
    (the parent writes "go": the sender starts; later "stop", or closes stdin)
    result units=H bytes=B incomplete=I datagrams=P batches=N cpu_s=C
where units are complete data heaps (those with item 0x1000: descriptor and stop heaps
are not counted), bytes their payload, incomplete the heaps spead2 evicted or flushed
incomplete, batches the receive calls that brought packets (spead2's own count), and
cpu_s the process's user + system time (every spead2 thread included)
from "go" until the heap count stops moving after "stop": the same window as every
other receiver's.
"""

import argparse
import resource
import sys
import threading
import time

import spead2
import spead2.recv
from recv_common import add_socket_args, bound_socket, print_ready


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    add_socket_args(ap, timeout=60.0)
    ap.add_argument("--heap-size", type=int, required=True)
    args = ap.parse_args()
    try:
        run(args)
    except Exception as e:  # the parent reads this line instead of a result
        print(f"error {type(e).__name__}: {e}", flush=True)
        sys.exit(1)


def run(args):
    sock = bound_socket(args)
    tp = spead2.ThreadPool(1)
    # Heap payload plus descriptors; max_free/initial as in spead2_bench's receiver.
    pool = spead2.MemoryPool(args.heap_size, args.heap_size + 4096, 16, 16)
    config = spead2.recv.StreamConfig(max_heaps=4, memory_allocator=pool)
    ring = spead2.recv.RingStreamConfig(heaps=16)
    stream = spead2.recv.Stream(tp, config, ring)
    stream.add_udp_reader(sock, max_size=args.max_size)
    counts = {"heaps": 0, "bytes": 0}
    done = threading.Event()

    def consume():
        for heap in stream:
            data = [len(memoryview(i)) for i in heap.get_items() if i.id == 0x1000]
            if data:
                counts["heaps"] += 1
                counts["bytes"] += data[0]
        done.set()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    print_ready(sock)
    started = time.monotonic()
    go = threading.Event()
    stop = threading.Event()

    def listen():
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
            else:
                break
        go.set()
        stop.set()

    threading.Thread(target=listen, daemon=True).start()
    go.wait(args.timeout)
    cpu0 = cpu()
    stop.wait(max(0.0, args.timeout - (time.monotonic() - started)))
    # Whatever is still queued in the socket buffer is not lost: wait until the count
    # stops moving (bounded) before stopping.
    deadline = time.monotonic() + 2.0
    last = -1
    while time.monotonic() < deadline and not done.is_set():
        now = counts["heaps"]
        if now == last:
            break
        last = now
        time.sleep(0.05)
    stream.stop()
    consumer.join(5)
    c = cpu() - cpu0
    stats = stream.stats
    incomplete = stats["incomplete_heaps_evicted"] + stats["incomplete_heaps_flushed"]
    print(
        f"result units={counts['heaps']} bytes={counts['bytes']} incomplete={incomplete} "
        f"datagrams={stats['packets']} batches={stats['batches']} cpu_s={c:.4f}",
        flush=True,
    )
    del stream
    tp.stop()
    sock.close()


if __name__ == "__main__":
    main()
