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
import sys
import urllib.parse

import numpy as np
import spead2
import spead2.recv
from recv_common import Deadline, add_socket_args, bound_socket, print_ready


def q(x):
    return urllib.parse.quote(str(x), safe="")


def main():
    ap = argparse.ArgumentParser()
    add_socket_args(ap, timeout=30.0)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--max-heaps", type=int, default=4)
    args = ap.parse_args()
    run(args)


def run(args):
    sock = bound_socket(args)
    tp = spead2.ThreadPool(1)
    stream = spead2.recv.Stream(tp, spead2.recv.StreamConfig(max_heaps=args.max_heaps))
    stream.add_udp_reader(sock, max_size=args.max_size)
    print_ready(sock)
    ig = spead2.ItemGroup()
    described = set()
    heaps = 0
    incomplete = 0
    with Deadline(stream, args.timeout) as deadline:
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
    print(f"{deadline.word()} heaps={heaps} incomplete={incomplete}", flush=True)
    stream.stop()
    del stream
    tp.stop()
    sock.close()


if __name__ == "__main__":
    main()
