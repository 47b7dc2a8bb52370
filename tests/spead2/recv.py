#!/usr/bin/env python3
"""spead2's receiver for the interop tests: prints what spead2 decodes.

    recv.py --bind 127.0.0.1 --out-dir DIR [--port 0] [--timeout 30]

Protocol on stdout, one line each (text fields %-quoted, so lines split on spaces):
    ready port=P                      bound (the socket exists before anything is sent)
    heap cnt=C updated=N              a heap, and how many items ItemGroup.update changed
    item cnt=C id=0x.. name=.. value=V           an integer item (immediate), or
    item cnt=C id=0x.. name=.. len=L file=PATH   an array item; its bytes in PATH
    desc id=0x.. name=.. description=.. shape=.. dtype=.. format=.. fortran=0|1
                                      every descriptor, after the first heap that has it
    end heaps=N incomplete=I          the stop heap arrived
    timeout heaps=N incomplete=I      no stop heap within --timeout
"""

import argparse
import os
import socket
import sys
import threading
import urllib.parse

import numpy as np
import spead2
import spead2.recv


def q(x):
    return urllib.parse.quote(str(x), safe="")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--buffer", type=int, default=32 << 20)
    ap.add_argument("--max-size", type=int, default=9200)
    ap.add_argument("--max-heaps", type=int, default=4)
    args = ap.parse_args()
    run(args)


def run(args):
    # Our own socket, so port 0 works and the bound port can be printed.
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, args.buffer)  # SO_RCVBUFFORCE (root)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.buffer)
    sock.bind((args.bind, args.port))
    tp = spead2.ThreadPool(1)
    stream = spead2.recv.Stream(tp, spead2.recv.StreamConfig(max_heaps=args.max_heaps))
    stream.add_udp_reader(sock, max_size=args.max_size)
    print(f"ready port={sock.getsockname()[1]}", flush=True)
    timed_out = threading.Event()

    def expire():
        timed_out.set()
        stream.stop()

    timer = threading.Timer(args.timeout, expire)
    timer.start()
    ig = spead2.ItemGroup()
    described = set()
    heaps = 0
    incomplete = 0
    try:
        for heap in stream:
            if isinstance(heap, spead2.recv.IncompleteHeap):
                incomplete += 1
                continue
            heaps += 1
            updated = ig.update(heap)
            print(f"heap cnt={heap.cnt} updated={len(updated)}")
            for item in ig.values():
                if item.id not in described:
                    described.add(item.id)
                    dtype = item.dtype.str if item.dtype is not None else None
                    print(
                        f"desc id={item.id:#x} name={q(item.name)} "
                        f"description={q(item.description)} shape={q(item.shape)} "
                        f"dtype={q(dtype)} format={q(item.format)} "
                        f"fortran={int(item.order == 'F')}"
                    )
            for name, item in updated.items():
                v = item.value
                if isinstance(v, (int, np.integer)):
                    print(f"item cnt={heap.cnt} id={item.id:#x} name={q(name)} value={int(v)}")
                else:
                    data = np.asarray(v).tobytes(order=item.order)
                    path = os.path.join(args.out_dir, f"{heap.cnt}_{item.id:#x}.bin")
                    with open(path, "wb") as f:
                        f.write(data)
                    print(
                        f"item cnt={heap.cnt} id={item.id:#x} name={q(name)} "
                        f"len={len(data)} file={q(path)}"
                    )
            sys.stdout.flush()
    finally:
        timer.cancel()
    word = "timeout" if timed_out.is_set() else "end"
    print(f"{word} heaps={heaps} incomplete={incomplete}", flush=True)
    stream.stop()
    del stream
    tp.stop()
    sock.close()


if __name__ == "__main__":
    main()
