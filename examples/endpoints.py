#!/usr/bin/python3
"""Receive several endpoints as one stream, from Python: which endpoint each datagram was
sent to (the batch meta's destinations, as numpy arrays) and the source's own counters
per endpoint (its `stats`).

A capture host subscribes to its share of a stream's multicast groups, e.g.
    fhudpsrc endpoints=239.10.0.0+7:7148 multicast-iface=eth1
(eight groups on one port: one socket, eight joins). This example needs no network: it
lists three loopback endpoints, two on one port and one on another, sends datagrams to
each from Python, and a fourth kind to an address it did not list, which the source
drops and counts as `filtered`.

Run with the plugin on GST_PLUGIN_PATH (cargo build --release -p gstfirehose), with the
system Python (apt install python3-gi gir1.2-gstreamer-1.0 python3-numpy):

    GST_PLUGIN_PATH=target/release /usr/bin/python3 examples/endpoints.py [PER_ENDPOINT]

It prints one line per endpoint — the datagrams its batches' metas say were sent there,
and the source's count — then `filtered N`, and exits non-zero if any datagram is
missing or the two counts disagree.
"""

import ipaddress
import socket
import sys
import time

import gi
import numpy as np

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from custom_meta import reads_meta  # noqa: E402


def free_port():
    """A UDP port nobody holds now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@reads_meta("FirehoseBatchMeta")
def destinations_of(s):
    """Each datagram's destination as (16-byte IPv6 / v4-mapped rows, ports)."""
    rows = np.frombuffer(s.get_value("destinations").get_data(), "u1").reshape(-1, 16)
    ports = np.frombuffer(s.get_value("destination-ports").get_data(), "=u2")
    return rows, ports


def endpoint_stats(element):
    """The source's counters per endpoint: {"ip:port": (packets, bytes)}. The `endpoints`
    field of its stats holds one `endpoint` structure per endpoint, in a GstCaps (which
    PyGObject reads as it is)."""
    stats = element.get_property("stats")  # keep it: the caps below live inside it
    caps = stats.get_value("endpoints")
    out = {}
    for i in range(caps.get_size()):
        e = caps.get_structure(i)
        out[e.get_string("address")] = (e.get_value("packets"), e.get_value("bytes"))
    return out


def main():
    per_endpoint = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    p, q = free_port(), free_port()
    listed = [("127.0.0.1", p), ("127.0.0.2", p), ("127.0.0.3", q)]
    endpoints = ",".join(f"{a}:{port}" for a, port in listed)
    Gst.init(None)
    pipeline = Gst.parse_launch(
        f'fhudpsrc name=src endpoints="{endpoints}" '
        "! appsink name=sink sync=false caps=application/x-firehose-packets"
    )
    src, sink = pipeline.get_by_name("src"), pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    time.sleep(0.3)  # the sockets are bound when the source starts

    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for seq in range(per_endpoint):
        for a, port in listed:
            tx.sendto(seq.to_bytes(4, "big") * 8, (a, port))
        if seq % 10 == 0:
            tx.sendto(b"not listed", ("127.0.0.4", p))  # the wildcard port: filtered
        time.sleep(0.0002)  # a plain sender, one datagram per send

    want = per_endpoint * len(listed)
    seen = {}
    total = 0
    while total < want:
        sample = sink.emit("try-pull-sample", 5 * Gst.SECOND)
        if sample is None:
            break
        rows, ports = destinations_of(sample.get_buffer())
        # One key per distinct destination in this batch, counted without a loop.
        keys, counts = np.unique(np.column_stack([rows, ports.view("u1").reshape(-1, 2)]),
                                 axis=0, return_counts=True)
        for key, n in zip(keys, counts):
            a = ipaddress.IPv6Address(bytes(key[:16])).ipv4_mapped
            port = int(np.frombuffer(key[16:].tobytes(), "=u2")[0])
            seen[(str(a), port)] = seen.get((str(a), port), 0) + int(n)
        total += len(ports)

    time.sleep(0.2)  # the strays after the last listed datagram
    stats = endpoint_stats(src)
    filtered = src.get_property("stats").get_value("filtered")
    pipeline.set_state(Gst.State.NULL)
    ok = True
    for a, port in listed:
        name = f"{a}:{port}"
        got = seen.get((a, port), 0)
        counted = stats.get(name, (0, 0))[0]
        print(f"{name}: {got} datagrams in the metas, {counted} counted by the source")
        ok = ok and got == per_endpoint and counted == per_endpoint
    print(f"filtered {filtered}")
    return 0 if ok and total == want else 1


if __name__ == "__main__":
    sys.exit(main())
