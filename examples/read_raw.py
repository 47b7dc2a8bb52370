#!/usr/bin/python3
"""Read a raw recording (fhrecordsink format=raw) from Python: every record through its
index, its bytes as a numpy view of the memory-mapped data file (no copy, no loop).

    firehose launch 'fhtestsrc packet-size=1000 num-packets=1000 ! fhrecordsink format=raw location=x.raw'
    PYTHONPATH=python /usr/bin/python3 examples/read_raw.py x.raw

(with `scripts/setup install` or the python3-firehose package, no PYTHONPATH). Prints
how many records of each kind the file holds, how many are complete, their bytes, and
the first bytes of the first record. After a crash it reads exactly the records wholly
on disk (docs/recording.md, "What survives a crash").
"""

import sys
from collections import Counter

import numpy as np

import firehose_raw


def summary(path):
    kinds, complete, size, first = Counter(), 0, 0, None
    for r in firehose_raw.records(path):
        data = np.frombuffer(r.data, dtype=np.uint8)
        kinds[r.kind] += 1
        complete += r.complete
        size += data.size
        if first is None:
            first = data[:8]
    return kinds, complete, size, first


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: read_raw.py FILE.raw")
    kinds, complete, size, first = summary(sys.argv[1])
    n = sum(kinds.values())
    print(f"{n} records ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}), "
          f"{complete} complete, {size} bytes; first bytes {list(first) if first is not None else []}")
