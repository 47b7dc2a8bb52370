#!/usr/bin/python3
"""Read Firehose's metas from Python: the datagrams of a packet batch, the items and
descriptors of a SPEAD heap, the slots of a chunk -- as numpy arrays, no Python loop.

Each Firehose buffer carries, beside its Rust metas, a GstCustomMeta whose structure
holds scalars and numeric arrays (GBytes, native byte order):

  FirehoseBatchMeta      fhudpsrc / fhxdpsrc / fhdpdksrc / fhibvsrc / fhpcapsrc / fhtestsrc
                         batches (application/x-firehose-packets)
  FirehoseHeapMeta       speaddepay / fhspeadsrc heaps (application/x-spead-heap)
  FirehoseChunkInfoMeta  fhdepay / fhudpchunksrc / speaddepay mode=chunks chunks
                         (application/x-firehose-chunk)

docs/python.md lists every field. The elements' `readable-metas` property (default
true) switches them off.

A packet source whose downstream takes plain bytes (`fhudpsrc ! appsink`, no caps)
pushes one buffer per datagram instead, each with a GstNetAddressMeta naming its sender,
as stock udpsrc's buffers do (`retrieve-sender-address`, default true): `sender_of`.

Run with the plugin on GST_PLUGIN_PATH (cargo build --release -p gstfirehose), with the
system Python, which has PyGObject and numpy (apt install python3-gi
gir1.2-gstreamer-1.0 python3-numpy):

    GST_PLUGIN_PATH=target/release /usr/bin/python3 examples/read_metas.py

By default it reads 4 batches of fhtestsrc packets; give another pipeline ending in
`appsink name=sink` as the first argument to read real traffic, e.g.
    "fhudpsrc port=7148 ! speaddepay ! appsink name=sink"
    "fhudpsrc port=7148 output=batch ! appsink name=sink caps=application/x-firehose-packets"
    "fhudpsrc port=7148 ! appsink name=sink"      (one datagram per buffer, with its sender)
It prints what each buffer's meta says and exits non-zero if no buffer had one.
"""

import ipaddress
import sys

import gi
import numpy as np

gi.require_version("Gst", "1.0")
gi.require_version("GstNet", "1.0")
from gi.repository import Gst, GstNet  # noqa: E402,F401 (Gst: for importers)

from custom_meta import print_each, reads_meta  # noqa: E402

DEFAULT = (
    "fhtestsrc rate=0 packet-size=1024 num-packets=256 batch-size=64 "
    "! appsink name=sink sync=false caps=application/x-firehose-packets"
)


def array(s, field, dtype):
    """The GBytes field `field` of structure `s` as a numpy array of `dtype` (a view of
    one copy of the bytes, no loop)."""
    data = s.get_value(field).get_data() or b""
    return np.frombuffer(data, dtype=dtype)


@reads_meta("FirehoseBatchMeta")
def batch_of(s):
    """The datagrams of a batch buffer as numpy arrays, or None without the meta."""
    return {
        "packets": s.get_value("packets"),
        "offsets": array(s, "offsets", "=u4"),
        "lengths": array(s, "lengths", "=u4"),
        "timestamps": array(s, "timestamps", "=u8"),  # ns since the Unix epoch
        "addresses": array(s, "addresses", "u1").reshape(-1, 16),  # IPv6 / v4-mapped
        "ports": array(s, "ports", "=u2"),
        # Where each datagram was sent, from the sources that know it (fhudpsrc,
        # fhxdpsrc, fhdpdksrc, fhibvsrc); None from the others.
        "destinations": (array(s, "destinations", "u1").reshape(-1, 16)
                         if s.has_field("destinations") else None),
        "destination-ports": (array(s, "destination-ports", "=u2")
                              if s.has_field("destination-ports") else None),
    }


def address(row):
    """One row of a batch's `addresses` as an ip_address (IPv4 when v4-mapped)."""
    a = ipaddress.IPv6Address(bytes(row))
    return a.ipv4_mapped or a


def sender_of(buf):
    """The sender of a one-datagram buffer (its GstNetAddressMeta, as udpsrc attaches)
    as (ip_address, port), or None without the meta."""
    meta = GstNet.buffer_get_net_address_meta(buf)
    if meta is None:
        return None
    a = meta.addr  # a Gio.InetSocketAddress
    return ipaddress.ip_address(a.get_address().to_string()), a.get_port()


@reads_meta("FirehoseHeapMeta")
def heap_of(s):
    """The items, descriptors and completeness of a SPEAD heap buffer, or None."""
    caps = s.get_value("descriptors")
    descriptors = []
    for i in range(caps.get_size()):
        d = caps.get_structure(i)
        descriptors.append({
            "id": d.get_value("id"),
            "name": d.get_string("name"),
            "description": d.get_string("description"),
            "format": d.get_string("format"),  # e.g. "u8,f32"; "" when none
            "dtype": d.get_string("dtype"),  # numpy header; "" when none
            "shape": array(d, "shape", "=i8"),  # -1: variable length
        })
    return {
        "heap-cnt": s.get_value("heap-cnt"),
        "complete": s.get_value("complete"),
        "bytes-expected": s.get_value("bytes-expected"),
        "bytes-received": s.get_value("bytes-received"),
        "heap-address-bits": s.get_value("heap-address-bits"),
        "item-ids": array(s, "item-ids", "=u8"),
        "item-immediate": array(s, "item-immediate", "u1").astype(bool),
        # An immediate's value; an addressed item's offset in the buffer.
        "item-values": array(s, "item-values", "=u8"),
        "item-lengths": array(s, "item-lengths", "=u8"),
        "received-ranges": array(s, "received-ranges", "=u8").reshape(-1, 2),
        "descriptors": descriptors,
        "stream-ctrl": s.get_value("stream-ctrl") if s.has_field("stream-ctrl") else None,
    }


@reads_meta("FirehoseChunkInfoMeta")
def chunk_of(s):
    """Which slots of a chunk buffer hold data, and how many bytes, or None."""
    slots = s.get_value("slots")
    pps = s.get_value("packets-per-slot")
    return {
        "chunk-id": s.get_value("chunk-id"),
        "slots": slots,
        "slot-size": s.get_value("slot-size"),
        "slots-present": s.get_value("slots-present"),
        "packets": s.get_value("packets"),
        "bytes": s.get_value("bytes"),
        "present": array(s, "present", "u1").astype(bool),
        "bytes-present": array(s, "bytes-present", "=u8"),
        "packets-per-slot": pps,
        "packet-present": array(s, "packet-present", "u1").astype(bool).reshape(-1, max(pps, 1)),
    }


# The stream's descriptors by item id: a heap lists only those it carried (as spead2's
# Heap.get_descriptors()), so keep the latest of each, as spead2's ItemGroup.update does.
KNOWN_DESCRIPTORS = {}


def describe(buf):
    """One line saying what the buffer's readable meta says, or None."""
    b = batch_of(buf)
    if b is not None:
        senders = {f"{a}:{p}" if a.version == 4 else f"[{a}]:{p}"
                   for a, p in ((address(r), p) for r, p in zip(b["addresses"], b["ports"]))}
        return (f"batch of {b['packets']} datagrams, {int(b['lengths'].sum())} bytes, "
                f"offsets {b['offsets'][:3].tolist()}..., from {sorted(senders)}")
    h = heap_of(buf)
    if h is not None:
        items = ", ".join(
            f"{i:#x}={v}" if imm else f"{i:#x}:{n} B"
            for i, imm, v, n in zip(h["item-ids"], h["item-immediate"],
                                    h["item-values"], h["item-lengths"]))
        KNOWN_DESCRIPTORS.update((d["id"], d) for d in h["descriptors"])
        names = [KNOWN_DESCRIPTORS[i]["name"] if i in KNOWN_DESCRIPTORS else f"{i:#x}"
                 for i in h["item-ids"].tolist()]
        return (f"heap {h['heap-cnt']}: complete={h['complete']} "
                f"{h['bytes-received']} of {h['bytes-expected']} bytes; items {items}; "
                f"named {names}")
    c = chunk_of(buf)
    if c is not None:
        return (f"chunk {c['chunk-id']}: {c['slots-present']} of {c['slots']} slots, "
                f"missing {np.flatnonzero(~c['present']).tolist()}, "
                f"{int(c['bytes-present'].sum())} bytes")
    s = sender_of(buf)
    if s is not None:
        a, port = s
        return f"datagram of {buf.get_size()} bytes from {a}:{port}"
    return None


def main():
    return print_each(DEFAULT, describe, "a readable Firehose meta")


if __name__ == "__main__":
    sys.exit(main())
