#!/usr/bin/env python3
"""spead2's sender for the interop tests: a stream of heaps with several kinds of item.

    send.py --port P --expect-dir DIR [--host 127.0.0.1] [--flavour 40] [--packet-size 1472]
            [--heaps 4] [--heap-bytes 1048576] [--rate 1e9] [--descriptor-frequency 0]

Items (ItemGroup order), per heap k (0-based), heap cnt = k + 1:
    0x1600 timestamp  format u<A>, scalar         immediate: 1000 + 4096·k
    0x1000 samples    dtype <i2, shape (B/4, 2)   addressed, B = --heap-bytes
    0x1001 flags      dtype u1, shape (17,)       addressed
    0x1002 tiny       dtype >u2, shape (2,)       4 bytes: spead2 sends it immediate
    0x1003 visibility dtype <c8, shape (4, 8)     addressed
    0x1004 label      format u8, shape (None,)    variable length: b"heap-k"
    0x1005 matrix     dtype <f4, shape (3, 5), Fortran order
then the stop heap. Before sending, the bytes spead2 sends for each item value
(Item.to_buffer()) are written to DIR/<k>_<id>.bin and the descriptors to
DIR/descriptors.txt ("id name description shape dtype format fortran", %-quoted).
Prints "ready" before sending and "sent heaps=N" after the stop heap.
"""

import argparse
import os
import sys
import urllib.parse

import numpy as np
import spead2
import spead2.send


def q(x):
    return urllib.parse.quote(str(x), safe="")


def values(k, heap_bytes):
    n = heap_bytes // 4
    base = np.arange(2 * n, dtype=np.int64)
    return {
        "timestamp": 1000 + 4096 * k,
        "samples": ((base * (2 * k + 3)) % 65521 - 32000).astype("<i2").reshape(n, 2),
        "flags": (np.arange(17) * (k + 1) % 256).astype(np.uint8),
        "tiny": np.array([k, 0xABCD], dtype=">u2"),
        "visibility": (np.arange(32) * (1 + 2j) + k).astype("<c8").reshape(4, 8),
        "label": np.frombuffer(f"heap-{k}".encode(), dtype=np.uint8),
        "matrix": np.asfortranarray((np.arange(15) * 0.5 + k).astype("<f4").reshape(3, 5)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--expect-dir", required=True)
    ap.add_argument("--flavour", type=int, default=40)
    ap.add_argument("--packet-size", type=int, default=1472)
    ap.add_argument("--heaps", type=int, default=4)
    ap.add_argument("--heap-bytes", type=int, default=1 << 20)
    ap.add_argument("--rate", type=float, default=1e9, help="bits/s (0 = unlimited)")
    ap.add_argument("--descriptor-frequency", type=int, default=0)
    args = ap.parse_args()
    run(args)


def run(args):
    flavour = spead2.Flavour(4, 64, args.flavour, 0)
    ig = spead2.send.ItemGroup(
        flavour=flavour, descriptor_frequency=args.descriptor_frequency or None
    )
    hb = args.heap_bytes
    ig.add_item(0x1600, "timestamp", "sample counter", (), format=[("u", args.flavour)])
    ig.add_item(0x1000, "samples", "ADC samples, 2 pols", (hb // 4, 2), dtype="<i2")
    ig.add_item(0x1001, "flags", "odd-sized bytes", (17,), dtype="u1")
    ig.add_item(0x1002, "tiny", "small enough to be immediate", (2,), dtype=">u2")
    ig.add_item(0x1003, "visibility", "complex", (4, 8), dtype="<c8")
    ig.add_item(0x1004, "label", "variable length", (None,), format=[("u", 8)])
    ig.add_item(0x1005, "matrix", "Fortran order", (3, 5), dtype="<f4", order="F")
    with open(os.path.join(args.expect_dir, "descriptors.txt"), "w") as f:
        for item in ig.values():
            dtype = item.dtype.str if item.dtype is not None else None
            f.write(
                f"{item.id:#x} {q(item.name)} {q(item.description)} {q(item.shape)} "
                f"{q(dtype)} {q(item.format)} {int(item.order == 'F')}\n"
            )
    heaps = []
    for k in range(args.heaps):
        for name, v in values(k, hb).items():
            ig[name].value = v
            with open(os.path.join(args.expect_dir, f"{k}_{ig[name].id:#x}.bin"), "wb") as f:
                f.write(bytes(ig[name].to_buffer()))
        heaps.append(ig.get_heap())
    tp = spead2.ThreadPool(1)
    config = spead2.send.StreamConfig(
        max_packet_size=args.packet_size, rate=args.rate / 8, max_heaps=8
    )
    stream = spead2.send.UdpStream(tp, [(args.host, args.port)], config, buffer_size=8 << 20)
    print("ready", flush=True)
    for k, heap in enumerate(heaps):
        stream.send_heap(heap, cnt=k + 1)
    stream.send_heap(ig.get_end(), cnt=len(heaps) + 1)
    print(f"sent heaps={len(heaps)}", flush=True)
    del stream
    tp.stop()


if __name__ == "__main__":
    main()
