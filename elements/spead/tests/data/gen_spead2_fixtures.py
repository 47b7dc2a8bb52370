"""Writes the spead2 fixtures used by the speaddepay / reassembly tests.

Run with spead2 4.5.1 and numpy (the project's .venv):
    .venv/bin/python elements/spead/tests/data/gen_spead2_fixtures.py elements/spead/tests/data

For each flavour (64-40, 64-48) and packet size (9000, 256) it writes
  spead2-<flavour>-<size>.hex       the packets spead2's sender wrote (concatenated, hex)
  spead2-<flavour>-<size>.expect    what spead2's receiver made of them: one line per
                                    heap item (`heap <cnt> item <id> imm <value>` or
                                    `heap <cnt> item <id> bytes <hex>`) and per
                                    descriptor (`heap <cnt> desc <id> <name>`)
"""
import os
import sys

import numpy as np
import spead2
import spead2.recv
import spead2.send


def send(bits, packet):
    tp = spead2.ThreadPool()
    fl = spead2.Flavour(4, 64, bits, 0)
    st = spead2.send.BytesStream(tp, spead2.send.StreamConfig(max_packet_size=packet))
    ig = spead2.send.ItemGroup(flavour=fl)
    ig.add_item(0x1000, "timestamp", "a time", shape=(), format=[("u", 48)])
    ig.add_item(0x1001, "data", "the data", shape=(4, 8), dtype=np.int16)
    ig.add_item(0x1002, "var", "variable", shape=(None, 3), format=[("u", 8), ("f", 32)])
    ig.add_item(0x1003, "str", "", shape=(None,), format=[("c", 8)])
    ig.add_item(0x1004, "big", "a big one", shape=(1000,), dtype=np.uint32)
    ig["timestamp"].value = 5
    ig["data"].value = np.arange(32, dtype=np.int16).reshape(4, 8)
    ig["var"].value = [[(1, 2.0)] * 3] * 2
    ig["str"].value = "hello"
    ig["big"].value = np.arange(1000, dtype=np.uint32) * 7
    st.send_heap(ig.get_heap(descriptors="all", data="all"))
    ig["timestamp"].value = 6
    ig["big"].value = np.arange(1000, dtype=np.uint32) * 11
    st.send_heap(ig.get_heap(descriptors="none", data="all"))
    st.send_heap(ig.get_end())
    data = st.getvalue()
    del st
    tp.stop()
    return data


def receive(data):
    tp = spead2.ThreadPool()
    stream = spead2.recv.Stream(tp)
    stream.add_buffer_reader(data)
    lines = []
    for heap in stream:
        for d in heap.get_descriptors():
            lines.append(f"heap {heap.cnt} desc {d.id} {d.name.decode() if isinstance(d.name, bytes) else d.name}")
        for item in heap.get_items():
            if item.is_immediate:
                lines.append(f"heap {heap.cnt} item {item.id} imm {item.immediate_value}")
            else:
                lines.append(f"heap {heap.cnt} item {item.id} bytes {bytes(memoryview(item)).hex()}")
    del stream
    tp.stop()
    return lines


def main(out):
    for bits in (40, 48):
        for packet in (9000, 256):
            data = send(bits, packet)
            base = os.path.join(out, f"spead2-64-{bits}-{packet}")
            with open(base + ".hex", "w") as f:
                f.write(data.hex() + "\n")
            with open(base + ".expect", "w") as f:
                f.write("\n".join(receive(data)) + "\n")


main(sys.argv[1])
