#!/usr/bin/python3
"""Read Firehose's message meta from Python: which message (chunk or SPEAD heap) a buffer
holds, and whether all of it arrived.

Every chunk (fhdepay, fhudpchunksrc, speaddepay mode=chunks) and every SPEAD heap
(speaddepay, fhspeadsrc) carries a GstCustomMeta named "FirehoseMessageMeta" whose
structure has the fields id (uint64), complete (boolean), bytes-expected and
bytes-received (uint64). Any GStreamer binding reads it; this is PyGObject.

Run with the plugin on GST_PLUGIN_PATH (cargo build --release -p gstfirehose):

    GST_PLUGIN_PATH=target/release /usr/bin/python3 examples/message_meta.py

(the system Python, which has PyGObject: apt install python3-gi gir1.2-gstreamer-1.0).

By default it generates 4096 test packets (fhtestsrc, a 64-bit sequence number at byte
8) and places them 1024 to a chunk with the `seq` handler; give another pipeline ending
in `appsink name=sink` as the first argument to read real traffic, e.g.
    "fhspeadsrc port=7148 ! appsink name=sink"
It prints one line per message and exits non-zero if none arrived.
"""

import sys

from custom_meta import print_each, reads_meta

DEFAULT = (
    "fhtestsrc rate=0 packet-size=1024 num-packets=4096 "
    "! fhdepay handler=seq handler-config=\"seq,offset=8,width=8,payload-offset=16\" "
    "heaps-per-chunk=1024 heap-size=1008 "
    "! appsink name=sink sync=false emit-signals=false"
)


@reads_meta("FirehoseMessageMeta")
def message_of(s):
    """The message meta of a buffer as a dict, or None if it has none."""
    return {
        "id": s.get_uint64("id")[1],
        "complete": s.get_boolean("complete")[1],
        "bytes-expected": s.get_uint64("bytes-expected")[1],
        "bytes-received": s.get_uint64("bytes-received")[1],
    }


def describe(buf):
    """One line saying what the buffer's message meta says, or None."""
    m = message_of(buf)
    if m is None:
        return None
    return (f"message {m['id']}: complete={m['complete']} "
            f"{m['bytes-received']} of {m['bytes-expected'] or '?'} bytes")


def main():
    return print_each(DEFAULT, describe, "a message meta")


if __name__ == "__main__":
    sys.exit(main())
