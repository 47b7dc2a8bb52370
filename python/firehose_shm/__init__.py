"""Read buffers that Firehose's ``fhshmsink`` serves, without GStreamer.

The producer passes each memfd segment once over a unix ``SOCK_SEQPACKET`` socket
(``SCM_RIGHTS``); after that each buffer is a small message naming a segment, an offset
and a length (several such messages may come in one packet, a batch, when the producer
had them at hand at once). Each item is a read-only numpy array that *views* the
segment: no byte is copied. The item goes back to the producer (its slot may be reused) when you release it:
``item.release()``, leaving a ``with item:`` block, or when the array and every view
derived from it are garbage collected. Do not keep using ``item.data`` after a release.

    from firehose_shm import Consumer
    with Consumer("/tmp/firehose-shm.sock") as c:
        for item in c:
            with item:
                print(item.data.nbytes, item.pts, item.metas.get("message"))

Metas arrive as plain Python values: ``metas["message"]`` (a dict: id, complete,
bytes_expected, bytes_received), ``metas["packets"]`` (a numpy structured array: offset,
len, rx_time_ns, ip, port, v4 per datagram), ``metas["chunk"]`` (a dict). The protocol
is described in docs/shared-memory.md.
"""

import array
import collections
import fcntl
import mmap
import os
import select
import socket
import struct
import threading
import time
import weakref

import numpy as np

__all__ = ["Consumer", "Item", "ProtocolError", "ProducerGone", "PACKET_DTYPE", "release_batch"]

MAGIC = 0x4D534846
# Producer protocol versions read: 3 adds rings in shared memory, which only a consumer
# that asks for them gets; this package does not ask, so it reads every message from
# the socket, as with version 2.
VERSIONS = (2, 3)
MAX_MESSAGE = 128 * 1024
MAX_BATCH = 256
MAX_SEGMENT = 1 << 40
NONE_TIME = (1 << 64) - 1

HELLO, SEGMENT, SEGMENT_GONE, CAPS, BUFFER, EOS, ERROR, BATCH, RELEASE, SUBSCRIBE = 1, 2, 3, 4, 5, 6, 7, 8, 16, 17
META_MESSAGE, META_PACKETS, META_CHUNK = 1, 2, 3

#: One datagram of a packet batch, as the wire packs it (35 bytes, little-endian).
PACKET_DTYPE = np.dtype(
    [
        ("offset", "<u4"),
        ("len", "<u4"),
        ("rx_time_ns", "<u8"),
        ("ip", "u1", (16,)),
        ("port", "<u2"),
        ("v4", "u1"),
    ]
)

_BUFFER = struct.Struct("<QIQQQQQIQH")  # seq, segment, offset, len, pts, dts, duration, flags, missed, metas


class ProtocolError(Exception):
    """The producer sent something the protocol does not allow (the connection ends)."""


class ProducerGone(Exception):
    """The producer closed the connection without end-of-stream (it stopped or crashed)."""


class Item:
    """One buffer: ``data`` (read-only uint8 numpy array viewing the segment), ``pts``,
    ``dts``, ``duration`` (ns or None), ``flags``, ``missed`` (buffers this consumer missed
    before this one), ``metas`` (dict), ``caps`` (string or None)."""

    __slots__ = ("data", "seq", "pts", "dts", "duration", "flags", "missed", "metas", "caps", "_finalizer", "__weakref__")

    def release(self):
        """Gives the buffer back to the producer (idempotent)."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def _recv_fds(sock, bufsize, maxfds, flags):
    """One message and the descriptors that came with it: ``socket.recv_fds`` with its
    ``flags`` honoured (Python 3.11's drops them, so MSG_DONTWAIT would block)."""
    fds = array.array("i")
    msg, ancdata, mflags, _ = sock.recvmsg(bufsize, socket.CMSG_LEN(maxfds * fds.itemsize), flags)
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return msg, list(fds), mflags


def _check_sealed(sid, fd):
    """Refuses a segment whose memfd could shrink: a page past the file's end faults
    (SIGBUS) on access, which would kill this process. fhshmsink seals its segments
    (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL); only the shrink seal is demanded."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as e:
        raise ProtocolError("segment %d: its descriptor cannot be sealed (not a memfd: %s); refusing to map it" % (sid, e)) from None
    if not seals & fcntl.F_SEAL_SHRINK:
        raise ProtocolError(
            "segment %d: its memfd is not sealed against shrinking (seals %#x, F_SEAL_SHRINK missing): "
            "the producer could cut it and make this consumer crash (SIGBUS); refusing to map it "
            "(is the producer an fhshmsink of this version?)" % (sid, seals)
        )


def _frames(data):
    """The messages of a batch (tag, count, then each message after its u32 length), as
    memoryviews, after checking the whole framing: 1 to MAX_BATCH non-empty messages
    that fill the packet exactly. A lying count or length refuses the packet before
    any message in it is read."""
    if len(data) < 3:
        raise ProtocolError("a batch cut short in its count")
    (count,) = struct.unpack_from("<H", data, 1)
    if not 0 < count <= MAX_BATCH:
        raise ProtocolError("a batch of %d messages (allowed: 1 to %d)" % (count, MAX_BATCH))
    view, pos, out = memoryview(data), 3, []
    for _ in range(count):
        if pos + 4 > len(data):
            raise ProtocolError("a batch cut short in a message length")
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if n == 0 or pos + n > len(data):
            raise ProtocolError("a batch message of %d bytes where %d are left" % (n, len(data) - pos))
        out.append(view[pos : pos + n])
        pos += n
    if pos != len(data):
        raise ProtocolError("%d bytes after a batch's last message" % (len(data) - pos))
    return out


def _time(v):
    return None if v == NONE_TIME else v


#: A release in the batch older than this (seconds) at a poll is sent then.
RELEASE_DELAY = 0.001
#: Most items one release message names when nothing else limits the batch.
DEFAULT_RELEASE_BATCH = 16


def release_batch(max_held):
    """The release batch for a consumer that may hold ``max_held`` items: an eighth of
    them (1 to ``DEFAULT_RELEASE_BATCH``), so releases waiting in the batch tie up little
    of what the producer lets it hold, or of its pool."""
    return max(1, min(max_held // 8, DEFAULT_RELEASE_BATCH))


class _Releaser:
    """Sends release messages in batches while the consumer is behind: one message names
    every item released since the last. A batch goes when it holds ``batch`` items, at a
    poll once its oldest release is ``RELEASE_DELAY`` old, and whenever the consumer
    finds nothing to read (it is about to wait; until its next poll it is ``idle`` and
    releases go at once, so an item collected on another thread is not held back).
    Releases that find the socket full stay in the batch. Counts ``messages`` sent and
    items ``released`` by them."""

    def __init__(self, sock):
        self.sock = sock
        self.pending = []
        self.since = None
        self.batch = DEFAULT_RELEASE_BATCH
        self.idle = True
        self.messages = 0
        self.released = 0
        self.lock = threading.Lock()

    def __call__(self, seq):
        with self.lock:
            if not self.pending:
                self.since = time.monotonic()
            self.pending.append(seq)
            if self.idle or len(self.pending) >= self.batch:
                self._send()

    def set_idle(self, idle):
        with self.lock:
            self.idle = idle
            if idle:
                self._send()

    def flush(self, everything=False):
        """Sends the batch if ``everything``, or if it is full or due."""
        if not self.pending:
            return
        with self.lock:
            if everything or len(self.pending) >= self.batch or time.monotonic() - self.since >= RELEASE_DELAY:
                self._send()

    def _send(self):
        while self.pending:
            batch = self.pending[:1024]
            msg = struct.pack("<BH%dQ" % len(batch), RELEASE, len(batch), *batch)
            try:
                self.sock.send(msg, socket.MSG_DONTWAIT)
                self.messages += 1
                self.released += len(batch)
            except BlockingIOError:
                return  # full: stays in the batch for the next flush
            except OSError:
                pass  # the producer is gone: nothing to give back to
            del self.pending[: len(batch)]
        self.since = None


class Consumer:
    """A connection to an ``fhshmsink``; iterate over it for :class:`Item` s until EOS.

    ``path``: the sink's ``socket-path``; ``abstract=True`` for a name in the abstract
    namespace. ``timeout``: seconds an iteration waits for the next item before raising
    ``TimeoutError`` (None: forever; a dead producer still ends the wait at once).
    ``on_full``: ``"block"`` (the producer waits for this consumer) or ``"drop"`` (this
    consumer misses buffers instead; ``item.missed`` says how many), None for the
    producer's default; ``max_held``: items this consumer may hold at once (0: the
    producer's limit, which it can only lower). ``release_batch``: items one release
    message may name (1: a message per item); by default a quarter of this consumer's
    max-held, at most 16. Releases wait in the batch only while messages are waiting
    for this consumer; the next iteration sends them, or :meth:`flush_releases`: a
    consumer that stops iterating holds the items in its batch until then (or until it
    closes). The environment variable ``FIREHOSE_SHM_RELEASE_BATCH`` sets the default
    batch (as for ``fhshmsrc``; 1 shows what batching saves).
    """

    def __init__(self, path, abstract=False, timeout=None, on_full=None, max_held=0, release_batch=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(("\0" + path) if abstract else path)
        if on_full is not None or max_held:
            mode = {"block": 0, "drop": 1, None: 0}[on_full]
            self.sock.send(struct.pack("<BBI", SUBSCRIBE, mode, max_held))
        self.timeout = timeout
        self.segments = {}  # id -> (mmap, size)
        self.caps = None
        self.hello = None
        self._asked_held = max_held
        if release_batch is None and os.environ.get("FIREHOSE_SHM_RELEASE_BATCH", "").isdigit():
            release_batch = int(os.environ["FIREHOSE_SHM_RELEASE_BATCH"])
        self._release_batch = release_batch
        self._release = _Releaser(self.sock)
        # Messages of the last batch not yet read (several travel in one packet when
        # the producer had them at hand at once).
        self._batch = collections.deque()
        #: Packets received, and how many of them were batches.
        self.packets = 0
        self.batches = 0
        if release_batch is not None:
            self._release.batch = max(1, min(release_batch, 1024))

    def flush_releases(self):
        """Sends every release waiting in the batch now."""
        self._release.flush(True)

    @property
    def release_counts(self):
        """(release messages sent, items they released)."""
        return self._release.messages, self._release.released

    def close(self):
        """Closes the connection: the producer drops every reference this consumer held."""
        self.sock.close()
        self.segments.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __iter__(self):
        while True:
            item = self.next()
            if item is None:
                return
            yield item

    def next(self):
        """The next item, or None at end-of-stream."""
        rel = self._release
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            rel.idle = False
            rel.flush()
            if self._batch:
                item = self._handle(self._batch.popleft(), [], 0)
                if item is not None:
                    return None if item is EOS else item
                continue
            try:
                data, fds, flags = _recv_fds(self.sock, MAX_MESSAGE, 4, socket.MSG_DONTWAIT)
            except BlockingIOError:
                # Nothing to read: the batch goes now, and releases made while this
                # waits (items collected on another thread) go at once.
                rel.set_idle(True)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no message from the producer in %s s" % self.timeout) from None
                select.select([self.sock], [], [], left)
                continue
            except ConnectionResetError:
                raise ProducerGone("the producer closed the connection without end-of-stream") from None
            try:
                item = self._handle(data, fds, flags)
            finally:
                for fd in fds:
                    os.close(fd)
            if item is not None:
                return None if item is EOS else item

    def _handle(self, data, fds, flags):
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ProtocolError("a message longer than the protocol allows")
        if not data and not fds:
            raise ProducerGone("the producer closed the connection without end-of-stream (it stopped or crashed)")
        kind = data[0]
        if isinstance(data, bytes):
            self.packets += 1
            if kind == BATCH:
                if fds:
                    raise ProtocolError("%d descriptors came with a batch" % len(fds))
                if self.hello is None:
                    raise ProtocolError("a batch before the hello")
                self._batch.extend(_frames(data))
                self.batches += 1
                return None
        elif kind == BATCH:
            raise ProtocolError("a batch inside a batch")
        want_fds = 1 if kind == SEGMENT else 0
        if len(fds) != want_fds:
            raise ProtocolError("%d descriptors came with a message of type %d" % (len(fds), kind))
        if self.hello is None and kind not in (HELLO, ERROR):
            raise ProtocolError("a message of type %d before the hello" % kind)
        try:
            return self._decode(kind, memoryview(data)[1:], fds)
        except struct.error as e:
            raise ProtocolError("message of type %d cut short: %s" % (kind, e)) from None

    def _decode(self, kind, b, fds):
        if kind == HELLO:
            magic, version, on_full, consumer, max_held = struct.unpack("<IHBQI", b)
            if magic != MAGIC or version not in VERSIONS:
                raise ProtocolError(
                    "not a Firehose shared-memory producer of protocol version 2 or 3 (it speaks %d)" % version
                )
            self.hello = {"consumer": consumer, "on_full": ("block", "drop")[on_full], "max_held": max_held}
            if self._release_batch is None:
                held = min(self._asked_held, max_held) if self._asked_held else max_held
                self._release.batch = release_batch(held)
        elif kind == SEGMENT:
            sid, size = struct.unpack("<IQ", b)
            if sid in self.segments or not 0 < size <= MAX_SEGMENT:
                raise ProtocolError("segment %d of %d bytes" % (sid, size))
            _check_sealed(sid, fds[0])
            if os.fstat(fds[0]).st_size < size:
                raise ProtocolError("segment %d announced larger than its file" % sid)
            self.segments[sid] = (mmap.mmap(fds[0], size, mmap.MAP_SHARED, mmap.PROT_READ), size)
        elif kind == SEGMENT_GONE:
            (sid,) = struct.unpack("<I", b)
            if self.segments.pop(sid, None) is None:
                raise ProtocolError("segment %d was never announced" % sid)
        elif kind in (CAPS, ERROR):
            (n,) = struct.unpack_from("<I", b)
            if n != len(b) - 4:
                raise ProtocolError("text of %d bytes in a message of %d" % (n, len(b)))
            text = bytes(b[4:]).decode()
            if kind == ERROR:
                raise ProtocolError("the producer reported: " + text)
            self.caps = text
        elif kind == EOS:
            return EOS
        elif kind == BUFFER:
            return self._buffer(b)
        else:
            raise ProtocolError("unknown message type %d" % kind)
        return None

    def _buffer(self, b):
        seq, sid, offset, length, pts, dts, duration, flags, missed, nmetas = _BUFFER.unpack_from(b)
        seg = self.segments.get(sid)
        if seg is None:
            raise ProtocolError("a buffer in segment %d, never announced" % sid)
        mm, size = seg
        if offset + length > size:
            raise ProtocolError("a buffer of %d bytes at %d outside segment %d (%d bytes)" % (length, offset, sid, size))
        metas, pos = {}, _BUFFER.size
        for _ in range(nmetas):
            tag, n = struct.unpack_from("<HI", b, pos)
            pos += 6
            body = b[pos : pos + n]
            if len(body) != n:
                raise ProtocolError("meta cut short")
            pos += n
            if tag == META_MESSAGE:
                i, complete, expected, received = struct.unpack("<QBQQ", body)
                metas["message"] = {"id": i, "complete": bool(complete), "bytes_expected": expected, "bytes_received": received}
            elif tag == META_PACKETS:
                (count,) = struct.unpack_from("<I", body)
                if 4 + count * PACKET_DTYPE.itemsize != n:
                    raise ProtocolError("packet list of %d in %d bytes" % (count, n))
                p = np.frombuffer(bytes(body), PACKET_DTYPE, count, 4)
                if count and int((p["offset"].astype(np.uint64) + p["len"]).max()) > length:
                    raise ProtocolError("a datagram outside its buffer")
                metas["packets"] = p
            elif tag == META_CHUNK:
                names = ("chunk_id", "slots", "slot_size", "slots_present", "packets_per_slot", "packets", "bytes")
                c = dict(zip(names, struct.unpack_from("<7Q", body)))
                at = 56
                for key in ("present", "packet_present"):
                    (w,) = struct.unpack_from("<I", body, at)
                    c[key] = list(struct.unpack_from("<%dQ" % w, body, at + 4))
                    at += 4 + 8 * w
                metas["chunk"] = c
            # other tags: metas this reader does not know, skipped
        if pos != len(b):
            raise ProtocolError("%d bytes after the buffer's last meta" % (len(b) - pos))
        item = Item()
        item.data = np.frombuffer(mm, np.uint8, length, offset)
        item.seq, item.flags, item.missed = seq, flags, missed
        item.pts, item.dts, item.duration = _time(pts), _time(dts), _time(duration)
        item.metas, item.caps = metas, self.caps
        # Released when the array (and every view of it) is gone, or on release().
        item._finalizer = weakref.finalize(item.data, self._release, seq)
        return item
