#!/usr/bin/env python3
"""Prints the packets spead2's own sender makes for one heap, as one hex line.

Used by elements/spead/tests/interop*.rs to check speadpay's engine byte for byte.

    packets.py --flavour 40 --packet-size 1472 --cnt 7 < spec
    packets.py --decode < hex        spead2's receiver reads packets (one hex line) and
                                     prints "item ID HEX" for each item of each heap

The heap is read from stdin, one item per line, in pointer order:
    imm ID VALUE                               immediate item
    bytes ID HEX                               addressed item (never made immediate)
    desc ID NAME DESCRIPTION SHAPE TYPE        descriptor (spead2.Descriptor); SHAPE is
                                               comma-separated dims, None for variable,
                                               - for a scalar; TYPE is dtype:<i2 or a
                                               format such as u8 or u40,c8
    stop                                       the end-of-stream control item
Numbers are decimal or 0x-hex; '_' in NAME or DESCRIPTION stands for a space, and a
lone '-' for the empty string.
"""

import argparse
import sys

import spead2
import spead2.recv
import spead2.send


class RawItem:
    """What spead2.send.Heap.add_item needs of an item: id, bytes, immediate or not."""

    def __init__(self, id, data, allow_immediate):
        self.id = id
        self._data = data
        self._allow_immediate = allow_immediate

    def to_buffer(self):
        return memoryview(self._data)

    def allow_immediate(self):
        return self._allow_immediate


def number(s):
    return int(s, 0)


def descriptor(fields):
    id_, name, description, shape, type_ = fields
    dims = () if shape == "-" else tuple(None if d == "None" else int(d) for d in shape.split(","))
    kw = {}
    if type_.startswith("dtype:"):
        kw["dtype"] = type_[len("dtype:"):]
    else:
        kw["format"] = [(f[0], int(f[1:])) for f in type_.split(",")]
    def text(t):
        return "" if t == "-" else t.replace("_", " ")

    return spead2.Descriptor(number(id_), text(name), text(description), dims, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flavour", type=int, default=40, help="heap address bits")
    ap.add_argument("--packet-size", type=int, default=1472)
    ap.add_argument("--cnt", type=lambda s: int(s, 0), default=1)
    ap.add_argument("--decode", action="store_true")
    args = ap.parse_args()
    if args.decode:
        decode(bytes.fromhex(sys.stdin.read().strip()))
        return
    flavour = spead2.Flavour(4, 64, args.flavour, 0)
    addr_bytes = args.flavour // 8
    heap = spead2.send.Heap(flavour)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        kind = words[0]
        if kind == "imm":
            value = number(words[2]).to_bytes(addr_bytes, "big")
            heap.add_item(RawItem(number(words[1]), value, True))
        elif kind == "bytes":
            data = bytes.fromhex(words[2]) if len(words) > 2 else b""
            heap.add_item(RawItem(number(words[1]), data, False))
        elif kind == "desc":
            heap.add_descriptor(descriptor(words[1:]))
        elif kind == "stop":
            heap.add_end()
        else:
            sys.exit(f"packets.py: unknown line {line!r}")
    run(heap, args)


def run(heap, args):
    # Inside a function, and stopped explicitly: module-level spead2 objects can hang
    # the interpreter at exit.
    tp = spead2.ThreadPool(1)
    config = spead2.send.StreamConfig(max_packet_size=args.packet_size)
    stream = spead2.send.BytesStream(tp, config)
    stream.set_cnt_sequence(args.cnt, 1)
    stream.send_heap(heap)
    print(stream.getvalue().hex())
    sys.stdout.flush()
    del stream
    tp.stop()


def decode(data):
    tp = spead2.ThreadPool(1)
    stream = spead2.recv.Stream(tp)
    stream.add_buffer_reader(data)
    for heap in stream:
        print(f"heap {heap.cnt}")
        for item in heap.get_items():
            print(f"item {item.id:#x} {bytes(memoryview(item)).hex()}")
    sys.stdout.flush()
    stream.stop()
    del stream
    tp.stop()


if __name__ == "__main__":
    main()
