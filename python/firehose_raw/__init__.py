"""Reads a Firehose raw recording: the data file `fhrecordsink format=raw` wrote and the
index beside it (`<data file>.idx`, docs/recording.md).

    import firehose_raw
    for r in firehose_raw.records("chunks-00000.raw"):
        print(r.kind, r.id, r.complete, len(r.data))

Only records that lie wholly in the data file are returned: after a crash the index can
reach past the data (the last records did not all reach the disk) and its last entry can
be torn; both are left out, as `firehose_record::index::read` does in Rust. The data file
is memory-mapped, so each record's `data` is a view into it, not a copy
(`numpy.frombuffer(r.data, dtype=...)` reads it without a loop).
"""

import mmap
import struct
from typing import Iterator, NamedTuple, Optional

MAGIC = b"FHRAWIX1"
#: The record kinds of the index (the `kind` field, bits 8..15 of the flags).
KINDS = {0: "buffer", 1: "packet", 2: "heap", 3: "chunk", 4: "slot"}
NO_PTS = 0xFFFFFFFFFFFFFFFF


class Record(NamedTuple):
    """One index entry and the bytes it names."""

    id: int
    """Packet number, heap counter, chunk id, slot index or buffer number (by kind)."""
    offset: int
    """Byte offset in the data file."""
    kind: str
    """buffer, packet, heap, chunk or slot (a slot lies inside the chunk before it)."""
    complete: bool
    time_ns: int
    """Capture time, ns since the Unix epoch (0: unknown)."""
    pts_ns: Optional[int]
    data: memoryview


def records(path: str) -> Iterator[Record]:
    """The records of the raw data file `path`, in file order."""
    with open(path + ".idx", "rb") as f:
        idx = f.read()
    if idx[:8] != MAGIC or len(idx) < 16:
        raise ValueError(f"{path}.idx is not a Firehose raw index")
    # Take the lengths from the header: later versions may append fields.
    hlen, elen = struct.unpack_from("<II", idx, 8)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)) if size else memoryview(b"")
    # range() stops before a torn last entry.
    for at in range(hlen, len(idx) - elen + 1, elen):
        ident, off, length, flags, t_ns, pts = struct.unpack_from("<QQIIQQ", idx, at)
        if off + length > size:
            continue  # not (all) in the data file: a crash came first
        yield Record(
            id=ident,
            offset=off,
            kind=KINDS.get(flags >> 8 & 0xFF, "unknown"),
            complete=bool(flags & 1),
            time_ns=t_ns,
            pts_ns=None if pts == NO_PTS else pts,
            data=data[off : off + length],
        )
