#!/usr/bin/env python3
"""spead2's chunk stream for the interop tests: prints the chunks spead2 places.

    chunk_recv.py --out-dir DIR --heaps-per-chunk N --heap-size S
                  [--max-chunks M] [--place-item ID --place-step K --place-offset O]
                  [--bind 127.0.0.1] [--port 0] [--timeout 30]

A `spead2.recv.ChunkRingStream` whose place callback (a numba cfunc, passed as a
`scipy.LowLevelCallable`) puts a heap whose length is S at n = (v - O) / K, v being its
HEAP_CNT (no --place-item) or the value of immediate item ID: chunk n // N, slot n % N.
Heaps of another length (descriptors, the stop heap), values before O or off the step
are dropped, as `speaddepay mode=chunks` does.

Protocol on stdout, one line each:
    ready port=P                          bound (before anything is sent)
    chunk id=C present=0110.. file=PATH   a chunk: presence per slot, its bytes in PATH
    end chunks=N                          the stream stopped (stop heap)
    timeout chunks=N                      no stop heap within --timeout
"""

import argparse
import os

import numba
import numpy as np
import scipy
import spead2
import spead2.recv
from numba import types
from spead2.numba import intp_to_voidptr
from spead2.recv.numba import chunk_place_data
from recv_common import Deadline, add_socket_args, bound_socket, print_ready


def make_place(heaps_per_chunk, heap_size, by_item, step, offset):
    """The place callback, with the layout frozen in as constants."""

    @numba.cfunc(types.void(types.CPointer(chunk_place_data), types.uintp), nopython=True)
    def place(data_ptr, data_size):
        data = numba.carray(data_ptr, 1)
        items = numba.carray(intp_to_voidptr(data[0].items), 3, dtype=np.int64)
        # items: HEAP_CNT, HEAP_LENGTH, the placing item (-1 when absent).
        value = items[2] if by_item else items[0]
        if items[1] != heap_size or value < offset:
            return
        delta = value - offset
        if delta % step != 0:
            return
        n = delta // step
        data[0].chunk_id = n // heaps_per_chunk
        data[0].heap_index = n % heaps_per_chunk
        data[0].heap_offset = data[0].heap_index * heap_size

    return place


def main():
    ap = argparse.ArgumentParser()
    add_socket_args(ap, timeout=30.0)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--heaps-per-chunk", type=int, required=True)
    ap.add_argument("--heap-size", type=int, required=True)
    ap.add_argument("--max-chunks", type=int, default=4)
    ap.add_argument("--max-heaps", type=int, default=4)
    ap.add_argument("--place-item", type=lambda s: int(s, 0), default=0)
    ap.add_argument("--place-step", type=int, default=1)
    ap.add_argument("--place-offset", type=int, default=0)
    args = ap.parse_args()
    run(args)


def run(args):
    n, size = args.heaps_per_chunk, args.heap_size
    place = make_place(n, size, args.place_item != 0, args.place_step, args.place_offset)
    item = args.place_item if args.place_item else spead2.HEAP_CNT_ID
    chunk_config = spead2.recv.ChunkStreamConfig(
        items=[spead2.HEAP_CNT_ID, spead2.HEAP_LENGTH_ID, item],
        max_chunks=args.max_chunks,
        place=scipy.LowLevelCallable(place.ctypes, signature="void (void *, size_t)"),
    )
    # Enough chunks that the window never waits for one.
    pool = args.max_chunks + 4
    data_ring = spead2.recv.ChunkRingbuffer(pool)
    free_ring = spead2.recv.ChunkRingbuffer(pool)
    stream = spead2.recv.ChunkRingStream(
        spead2.ThreadPool(1),
        spead2.recv.StreamConfig(max_heaps=args.max_heaps),
        chunk_config,
        data_ring,
        free_ring,
    )
    for _ in range(pool):
        stream.add_free_chunk(
            spead2.recv.Chunk(
                present=np.zeros(n, np.uint8), data=np.zeros(n * size, np.uint8)
            )
        )
    sock = bound_socket(args)
    stream.add_udp_reader(sock, max_size=args.max_size)
    print_ready(sock)
    chunks = 0
    with Deadline(stream, args.timeout) as deadline:
        for chunk in data_ring:
            present = "".join("1" if p else "0" for p in chunk.present)
            path = os.path.join(args.out_dir, f"chunk-{chunk.chunk_id}.bin")
            with open(path, "wb") as f:
                f.write(chunk.data.tobytes())
            print(f"chunk id={chunk.chunk_id} present={present} file={path}", flush=True)
            chunks += 1
            chunk.present[:] = 0
            stream.add_free_chunk(chunk)
    print(f"{deadline.word()} chunks={chunks}", flush=True)


if __name__ == "__main__":
    main()
