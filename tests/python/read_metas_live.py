#!/usr/bin/python3
"""Driven by tests/tests/python_metas.rs: reads every field of the readable metas of
three live captures on loopback, with examples/read_metas.py's functions, and prints
them in a canonical text form that the Rust test compares with what it sent.

    fhudpsrc ! speaddepay ! appsink                       -> HEAP lines
    fhudpsrc ! speaddepay mode=chunks ... ! appsink       -> CHUNK lines
    fhudpsrc output=batch ! appsink (packets caps)        -> PKT lines
    fhudpsrc ! appsink (no caps: one datagram per buffer) -> DGRAM lines (with the sender)

Prints "PORTS heap=<p> chunk=<p> batch=<p> datagram=<p>" once the sockets are bound,
then reads until both SPEAD pipelines end (the stop heap: EOS) and `datagrams` datagrams
arrived at each of the last two, or `timeout` seconds passed. Usage: read_metas_live.py DATAGRAMS HEAP_SIZE TIMEOUT
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import read_metas  # noqa: E402
from read_metas import Gst  # noqa: E402


def ints(a):
    return ",".join(str(int(x)) for x in a)


def heap_line(buf, data):
    h = read_metas.heap_of(buf)
    assert h is not None, "a heap without FirehoseHeapMeta"
    items = []
    for i, imm, v, n in zip(h["item-ids"], h["item-immediate"], h["item-values"],
                            h["item-lengths"]):
        if imm:
            items.append(f"{int(i)}:imm:{int(v)}")
        else:
            items.append(f"{int(i)}:{data[int(v):int(v) + int(n)].hex()}")
    descs = ";".join(
        f"{d['id']}/{d['name']}/{d['description']}/{d['format']}/{d['dtype']}/{ints(d['shape'])}"
        for d in h["descriptors"])
    ranges = ",".join(f"{int(a)}-{int(b)}" for a, b in h["received-ranges"])
    ctrl = "-" if h["stream-ctrl"] is None else h["stream-ctrl"]
    return (f"HEAP cnt={h['heap-cnt']} complete={int(h['complete'])} "
            f"expected={h['bytes-expected']} received={h['bytes-received']} "
            f"abits={h['heap-address-bits']} size={len(data)} ranges={ranges} ctrl={ctrl} "
            f"items={' '.join(items)} descs={descs}")


def chunk_line(buf):
    c = read_metas.chunk_of(buf)
    assert c is not None, "a chunk without FirehoseChunkInfoMeta"
    present = "".join("1" if p else "0" for p in c["present"])
    return (f"CHUNK id={c['chunk-id']} slots={c['slots']} slot-size={c['slot-size']} "
            f"slots-present={c['slots-present']} packets={c['packets']} bytes={c['bytes']} "
            f"present={present} bytes-present={ints(c['bytes-present'])} "
            f"pps={c['packets-per-slot']} packet-present={c['packet-present'].size}")


def batch_lines(buf, data):
    b = read_metas.batch_of(buf)
    assert b is not None, "a batch without FirehoseBatchMeta"
    assert b["packets"] == len(b["offsets"]), "packets != len(offsets)"
    assert b["destinations"] is not None, "fhudpsrc knows each datagram's destination"
    out = []
    for off, n, ts, addr, port, dst, dport in zip(
            b["offsets"], b["lengths"], b["timestamps"], b["addresses"], b["ports"],
            b["destinations"], b["destination-ports"]):
        payload = data[int(off):int(off) + int(n)].hex()
        out.append(f"PKT len={int(n)} ts={int(ts)} addr={read_metas.address(addr)} "
                   f"port={int(port)} dst={read_metas.address(dst)}:{int(dport)} "
                   f"data={payload}")
    return out


def main():
    datagrams, heap_size, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    Gst.init(None)
    heaps = Gst.parse_launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 ! speaddepay ! appsink name=sink sync=false")
    chunks = Gst.parse_launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 ! speaddepay mode=chunks heaps-per-chunk=4 "
        f"heap-size={heap_size} ! appsink name=sink sync=false")
    batch = Gst.parse_launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 output=batch timestamps=true "
        "! appsink name=sink sync=false caps=application/x-firehose-packets")
    datagram = Gst.parse_launch(
        "fhudpsrc name=src address=127.0.0.1 port=0 ! appsink name=sink sync=false")
    pipes = {"heap": heaps, "chunk": chunks, "batch": batch, "datagram": datagram}
    for p in pipes.values():
        p.set_state(Gst.State.PLAYING)
    ports = {k: p.get_by_name("src").get_property("port") for k, p in pipes.items()}
    print(f"PORTS heap={ports['heap']} chunk={ports['chunk']} batch={ports['batch']} "
          f"datagram={ports['datagram']}", flush=True)
    sinks = {k: p.get_by_name("sink") for k, p in pipes.items()}
    ended = set()
    got = 0
    dgot = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (len(ended) < 2 or got < datagrams
                                           or dgot < datagrams):
        for name, sink in sinks.items():
            if name in ended:
                continue
            sample = sink.emit("try-pull-sample", 20 * Gst.MSECOND)
            if sample is None:
                if sink.get_property("eos"):
                    ended.add(name)
                continue
            buf = sample.get_buffer()
            ok, info = buf.map(Gst.MapFlags.READ)
            assert ok
            data = bytes(info.data)
            buf.unmap(info)
            if name == "heap":
                print(heap_line(buf, data))
            elif name == "chunk":
                print(chunk_line(buf))
            elif name == "datagram":
                sender = read_metas.sender_of(buf)
                assert sender is not None, "a datagram without GstNetAddressMeta"
                dgot += 1
                print(f"DGRAM len={len(data)} from={sender[0]}:{sender[1]} data={data.hex()}")
            else:
                lines = batch_lines(buf, data)
                got += len(lines)
                print("\n".join(lines))
    for p in pipes.values():
        p.set_state(Gst.State.NULL)
    print(f"END ended={','.join(sorted(ended))} datagrams={got} single={dgot}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
