#!/usr/bin/env python3
"""Reads what an fhshmsink serves, as numpy arrays viewing shared memory (no copy).

A SPEAD capture into numpy chunks, in two processes:

    firehose launch fhspeadsrc port=7148 ! fhshmsink socket-path=/tmp/spead.sock
    PYTHONPATH=python .venv/bin/python3 examples/shm_consumer.py --socket /tmp/spead.sock

Each item is one heap or chunk: ``item.data`` is its bytes, ``item.metas["message"]`` its
id and completeness, ``item.metas["chunk"]`` which slots arrived. Prints a summary line:
``buffers=N bytes=N messages=N incomplete=N missed=N end=eos``.

``--check`` verifies the test pattern of the transport's tests (byte k of the stream is
k mod 251).
"""

import argparse
import sys

import numpy as np

from firehose_shm import Consumer, ProducerGone


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", default="/tmp/firehose-shm.sock")
    ap.add_argument("--abstract", action="store_true", help="the socket is an abstract name")
    ap.add_argument("--timeout", type=float, default=None, help="seconds to wait for an item before giving up")
    ap.add_argument("--max", type=int, default=0, help="stop after this many items (0: at EOS)")
    ap.add_argument("--check", action="store_true", help="verify the k mod 251 test pattern")
    ap.add_argument("--verbose", action="store_true", help="one line per item")
    ap.add_argument(
        "--release",
        choices=("with", "gc"),
        default="with",
        help="give items back by leaving a with block, or when their arrays are collected",
    )
    args = ap.parse_args()

    buffers = nbytes = messages = incomplete = missed = 0
    offset = 0
    end = "eos"
    with Consumer(args.socket, abstract=args.abstract, timeout=args.timeout) as consumer:
        try:
            for item in consumer:
                with (item if args.release == "with" else _nothing()):
                    data = item.data  # a view of shared memory: no copy
                    if args.check:
                        want = ((np.arange(data.size, dtype=np.uint64) + offset) % 251).astype(np.uint8)
                        if not np.array_equal(data, want):
                            print("corrupt item %d" % buffers)
                            return 3
                        offset += data.size
                    m = item.metas.get("message")
                    if m is not None:
                        messages += 1
                        incomplete += not m["complete"]
                    if args.verbose:
                        print("item %d: %d bytes pts=%s metas=%s" % (buffers, data.size, item.pts, sorted(item.metas)))
                    buffers += 1
                    nbytes += data.size
                    missed += item.missed
                    # With --release gc, the next loop rebinds item and data: the array
                    # has no reference left and the item goes back to the producer.
                if args.max and buffers >= args.max:
                    end = "max"
                    break
        except ProducerGone as e:
            end = "closed"
            print(e, file=sys.stderr)
    print("buffers=%d bytes=%d messages=%d incomplete=%d missed=%d end=%s" % (buffers, nbytes, messages, incomplete, missed, end))
    return 0


if __name__ == "__main__":
    sys.exit(main())
