#!/usr/bin/env bash
# Fuzzes the SPEAD receive path with cargo-fuzz (libFuzzer + AddressSanitizer):
#   reassembly  packet decode, heap reassembly in every configuration, descriptors in
#               heaps, with the engine's invariants asserted on every heap
#   descriptor  descriptor parsing, and encode(parse(x)) == x
#   chunk_spead the chunk engine with the spead handler (chunk presence and byte
#               counts consistent, every packet written or counted)
#   chunk_seq   the chunk engine with the seq handler (counter widths, orders, wraps)
#   capture     pcap / pcapng reading and the UDP datagram in each record
#   frame       frame decoding to UDP datagrams for every link type, and the UDP filter
#
#   scripts/fuzz-spead.sh                 10 minutes per target
#   FUZZ_SECONDS=60 scripts/fuzz-spead.sh one minute per target
#   scripts/fuzz-spead.sh reassembly      one target only
#
# Not part of CI (it runs for minutes). Installs cargo-fuzz if missing. The toolchain
# here is stable; cargo-fuzz passes nightly-only flags (-Zsanitizer=address, …), which
# stable rustc accepts with RUSTC_BOOTSTRAP=1. Crashes land in
# elements/spead/fuzz/artifacts/<target>/; rerun one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>   (in elements/spead/fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${FUZZ_SECONDS:-600}
RSS_LIMIT_MB=${FUZZ_RSS_MB:-2048}
JOBS=${FUZZ_JOBS:-1}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(reassembly descriptor chunk_spead chunk_seq capture frame)

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-spead: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1

FUZZ_DIR=elements/spead/fuzz
DATA=elements/spead/tests/data

# Seeds: spead2's own streams (tests/data), as reassembly inputs (4 configuration bytes,
# then u16-length-framed packets, in a few configurations) and their descriptors.
seed() {
  python3 - "$DATA" "$FUZZ_DIR/corpus" <<'PY'
import os, sys
data, corpus = sys.argv[1], sys.argv[2]
def packets(b):
    out, pos = [], 0
    while pos + 8 <= len(b):
        n = int.from_bytes(b[pos+6:pos+8], "big")
        a = b[pos+3] * 8
        plen = 0
        for i in range(n):
            ip = int.from_bytes(b[pos+8+8*i:pos+16+8*i], "big")
            if ip >> 63 and (ip >> a) & ((1 << (63 - a)) - 1) == 4:
                plen = ip & ((1 << a) - 1)
        end = pos + 8 + 8 * n + plen
        out.append(b[pos:end])
        pos = end
    return out
os.makedirs(f"{corpus}/reassembly", exist_ok=True)
os.makedirs(f"{corpus}/descriptor", exist_ok=True)
os.makedirs(f"{corpus}/chunk_spead", exist_ok=True)
for name in sorted(os.listdir(data)):
    if not name.endswith(".hex"):
        continue
    pk = packets(bytes.fromhex(open(os.path.join(data, name)).read().strip()))
    for cfg in (b"\x00\x03\x00\x07", b"\x03\x00\x01\x05", b"\x07\x01\x00\x02"):
        body = b"".join(len(p).to_bytes(2, "big") + p for p in pk)
        # The chunk engine's input has the same framing: 4 configuration bytes, packets.
        for target in ("reassembly", "chunk_spead"):
            with open(f"{corpus}/{target}/{name}-{cfg.hex()}", "wb") as f:
                f.write(cfg + body)
    # The descriptors: DESCRIPTOR (id 5) values of the first packet that has them.
    for p in pk:
        n = int.from_bytes(p[6:8], "big"); a = p[3] * 8
        ptrs = [int.from_bytes(p[8+8*i:16+8*i], "big") for i in range(n)]
        payload = p[8 + 8 * n:]
        addrs = sorted(ip & ((1 << a) - 1) for ip in ptrs if not ip >> 63)
        for ip in ptrs:
            if not ip >> 63 and (ip >> a) & ((1 << (63 - a)) - 1) == 5:
                start = ip & ((1 << a) - 1)
                end = min([x for x in addrs if x > start] + [len(payload)])
                with open(f"{corpus}/descriptor/{name}-{start}", "wb") as f:
                    f.write(payload[start:end])
PY
}
if command -v python3 >/dev/null 2>&1; then
  seed
else
  echo "fuzz-spead: no python3, starting without seeds"
fi

cd "$FUZZ_DIR"
for t in "${TARGETS[@]}"; do
  echo "fuzz-spead: $t for ${SECONDS_PER_TARGET}s (rss limit ${RSS_LIMIT_MB} MiB)"
  cargo fuzz run "$t" --jobs "$JOBS" -- \
    -max_total_time="$SECONDS_PER_TARGET" \
    -rss_limit_mb="$RSS_LIMIT_MB" \
    -max_len=131072 \
    -timeout=10 \
    -print_final_stats=1
done
echo "fuzz-spead: no crash"
