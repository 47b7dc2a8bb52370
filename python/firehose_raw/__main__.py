"""python3 -m firehose_raw FILE...: one line per record (kind, id, offset, length,
complete) of each raw data file, then a count."""

import sys

from . import records

if len(sys.argv) < 2:
    sys.exit("usage: python3 -m firehose_raw FILE.raw [FILE.raw ...]")
for path in sys.argv[1:]:
    n = 0
    for r in records(path):
        print(r.kind, r.id, r.offset, len(r.data), int(r.complete))
        n += 1
    print(f"# {path}: {n} records", file=sys.stderr)
