#!/usr/bin/python3
"""Receive a SPEAD stream over AF_XDP straight into heaps, from Python.

`fhspeadsrc transport="fhxdpsrc ..."` is the heap reassembler fed by an AF_XDP socket in
one element: it takes each batch where the NIC wrote it in the UMEM and copies each
payload once, into its heap (docs/kernel-bypass.md). The heaps arrive at an appsink with
the FirehoseHeapMeta every language reads (examples/read_metas.py: `heap_of`), read here
as numpy arrays without a Python loop over packets.

Run as root (AF_XDP needs CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW), with the plugin on
GST_PLUGIN_PATH and the system Python (apt install python3-gi gir1.2-gstreamer-1.0
python3-numpy):

    sudo GST_PLUGIN_PATH=target/release /usr/bin/python3 examples/spead_over_xdp.py eth1 7148

More fhxdpsrc properties may follow (e.g. "queue=2 mode=native"). Prints "READY" once
the capture runs, then one line per heap -- "HEAP <cnt> complete=<0|1> <id>:<bytes> ..."
-- until the stream's stop heap ends it (or 10 s pass without a heap), then one "STATS"
line of the element's counters.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import read_metas  # noqa: E402
from read_metas import Gst  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    interface, port = sys.argv[1], int(sys.argv[2])
    extra = " ".join(sys.argv[3:])
    Gst.init(None)
    pipeline = Gst.parse_launch(
        "fhspeadsrc name=src max-heap-size=1048576 "
        f'transport="fhxdpsrc interface={interface} port={port} {extra}" '
        "! appsink name=sink sync=false"
    )
    sink = pipeline.get_by_name("sink")
    if pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
        msg = pipeline.get_bus().timed_pop_filtered(Gst.SECOND, Gst.MessageType.ERROR)
        err = msg.parse_error()[0].message if msg else "could not start"
        print(f"fhspeadsrc: {err}", file=sys.stderr)
        return 1
    print("READY", flush=True)
    heaps = 0
    while True:
        sample = sink.emit("try-pull-sample", 10 * Gst.SECOND)
        if sample is None:
            break  # EOS (the stop heap) or nothing for 10 s
        h = read_metas.heap_of(sample.get_buffer())
        if h is None:
            print("a heap without FirehoseHeapMeta", file=sys.stderr)
            return 1
        items = " ".join(
            f"{int(i)}:{'imm' if imm else int(n)}"
            for i, imm, n in zip(h["item-ids"], h["item-immediate"], h["item-lengths"])
        )
        print(f"HEAP {h['heap-cnt']} complete={int(h['complete'])} {items}", flush=True)
        heaps += 1
    stats = pipeline.get_by_name("src").get_property("stats")
    keys = ("heaps", "datagrams", "packets-copied", "packets-landed", "drops-kernel")
    print("STATS " + " ".join(f"{k}={stats.get_value(k)}" for k in keys), flush=True)
    pipeline.set_state(Gst.State.NULL)
    return 0 if heaps else 1


if __name__ == "__main__":
    sys.exit(main())
