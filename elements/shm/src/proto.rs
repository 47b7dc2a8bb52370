//! The shared-memory transport's messages: what travels over the unix `SOCK_SEQPACKET`
//! socket between `fhshmsink` (the producer) and each consumer (`fhshmsrc`, the Python
//! package), encoded and decoded without GStreamer.
//!
//! One socket packet is one message; the first byte says which. Integers are
//! little-endian. The payload bytes never travel: a buffer is named by segment, offset
//! and length inside a memfd segment whose descriptor went to the consumer once
//! ([`Msg::Segment`], with the descriptor as `SCM_RIGHTS`).
//!
//! Producer → consumer: [`Msg::Hello`], [`Msg::Segment`], [`Msg::SegmentGone`],
//! [`Msg::Caps`], [`Msg::Buffer`], [`Msg::Eos`], [`Msg::Error`].
//! Consumer → producer: [`Msg::Release`], [`Msg::Subscribe`].
//!
//! Decoding trusts nothing: every length is checked against the message and against a
//! cap, every segment id against the segments announced, every offset + length against
//! the segment's size ([`Consumer`] keeps what the producer announced; the producer
//! checks releases against what it sent, in the hub). A lie is a [`ProtoError`] that
//! names the field; the peer that told it is disconnected, nobody else. One lie is
//! not: a release of a buffer the consumer does not hold (never sent, or released
//! twice) only names its own references, so the hub counts it and ignores it.
//! Releases travel in batches ([`Msg::Release`] names up to [`MAX_RELEASE`] buffers).
//!
//! Protocol version 3 adds rings of messages in shared memory ([`crate::ring`]): a
//! consumer that asks for them ([`Msg::RingRequest`]) gets two descriptors
//! ([`Msg::Ring`]) and from then on reads the producer's packets from the ring, and
//! writes its releases into a ring of its own; [`Msg::Wake`] on the socket wakes a peer
//! that announced it sleeps. A consumer that does not ask (the Python package) gets
//! every message on the socket, as in version 2.
//!
//! Producer messages travel in batches too (protocol version 2): when several are
//! queued for a consumer at once (a buffer list, a socket that was full), one packet
//! carries them all ([`Batch`]: tag, count, then each message with its length). A
//! consumer checks the whole framing ([`frames`]) before it reads any message in it: a
//! count or a length that does not match the packet refuses the packet.

use std::fmt;

/// First field of [`Msg::Hello`]: "FHSM".
pub const MAGIC: u32 = 0x4d53_4846;
/// Protocol version the producer speaks. 2: producer messages may come in batches
/// ([`Batch`]); 3: rings in shared memory for the consumers that ask for them.
pub const VERSION: u16 = 3;
/// Oldest producer version a consumer of this crate reads (a version 2 producer has no
/// rings: the consumer stays on the socket).
pub const MIN_VERSION: u16 = 2;
/// Largest message either side sends or accepts, in bytes.
pub const MAX_MESSAGE: usize = 128 * 1024;
/// Largest caps or error string.
pub const MAX_TEXT: usize = 16 * 1024;
/// Most metas on one buffer.
pub const MAX_METAS: usize = 16;
/// Most buffers one release message names.
pub const MAX_RELEASE: usize = 1024;
/// Most messages one batch carries.
pub const MAX_BATCH: usize = 256;
/// Largest segment a consumer maps (1 TiB): more is a lie, not a pool.
pub const MAX_SEGMENT: u64 = 1 << 40;
/// Most segments a consumer keeps mapped at once.
pub const MAX_SEGMENTS: usize = 4096;
/// "No timestamp", for pts, dts and duration.
pub const NONE_TIME: u64 = u64::MAX;

const HELLO: u8 = 1;
const SEGMENT: u8 = 2;
const SEGMENT_GONE: u8 = 3;
const CAPS: u8 = 4;
const BUFFER: u8 = 5;
const EOS: u8 = 6;
const ERROR: u8 = 7;
const BATCH: u8 = 8;
const RING: u8 = 9;
const WAKE: u8 = 10;
const RING_REQUEST: u8 = 18;
/// A [`Msg::Wake`], encoded.
pub const WAKE_PACKET: &[u8] = &[WAKE];
/// Bytes before a batch's first message: tag and count.
const BATCH_HEAD: usize = 1 + 2;
const RELEASE: u8 = 16;
const SUBSCRIBE: u8 = 17;

/// Meta type tags on the wire. Unknown tags are skipped by readers.
pub mod meta_tag {
    /// Firehose's message meta ([`super::MessageMeta`]).
    pub const MESSAGE: u16 = 1;
    /// The packet batch meta ([`super::PacketMeta`] list).
    pub const PACKETS: u16 = 2;
    /// The chunk meta ([`super::ChunkMetaWire`]).
    pub const CHUNK: u16 = 3;
}

/// What the producer does when this consumer holds its limit of buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFull {
    /// The producer waits for this consumer.
    Block,
    /// The producer skips this consumer for that buffer and counts it missed.
    Drop,
}

impl OnFull {
    /// Parses `block` or `drop`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "block" => Some(Self::Block),
            "drop" => Some(Self::Drop),
            _ => None,
        }
    }

    /// The property value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Drop => "drop",
        }
    }
}

/// Firehose's message meta, as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MessageMeta {
    /// Message (heap, chunk) id.
    pub id: u64,
    /// Whether every byte arrived.
    pub complete: bool,
    /// Bytes the message should hold (0: unknown).
    pub bytes_expected: u64,
    /// Bytes that arrived.
    pub bytes_received: u64,
}

/// One datagram of a packet batch, as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PacketMeta {
    /// Offset of the payload in the buffer.
    pub offset: u32,
    /// Payload length.
    pub len: u32,
    /// Receive time, ns since the Unix epoch (0: unknown).
    pub rx_time_ns: u64,
    /// Sender address: IPv6 bytes (IPv4 mapped).
    pub ip: [u8; 16],
    /// Sender port.
    pub port: u16,
    /// Whether the sender was IPv4.
    pub v4: bool,
}

const PACKET_BYTES: usize = 4 + 4 + 8 + 16 + 2 + 1;

/// The chunk meta, as plain values.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ChunkMetaWire {
    /// Chunk number.
    pub chunk_id: u64,
    /// Slots per chunk.
    pub slots: u64,
    /// Bytes per slot.
    pub slot_size: u64,
    /// Slots present.
    pub slots_present: u64,
    /// Packets tracked per slot (0: not tracked).
    pub packets_per_slot: u64,
    /// Packets written.
    pub packets: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Slot presence bitmap words.
    pub present: Vec<u64>,
    /// Packet presence bitmap words.
    pub packet_present: Vec<u64>,
}

/// A meta carried with a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireMeta {
    /// Firehose's message meta.
    Message(MessageMeta),
    /// The packet batch meta.
    Packets(Vec<PacketMeta>),
    /// The chunk meta.
    Chunk(ChunkMetaWire),
}

/// Where one buffer's bytes are and what goes with them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BufferMsg {
    /// The producer's number for this buffer (named again in [`Msg::Release`]).
    pub seq: u64,
    /// Segment id (announced by [`Msg::Segment`]).
    pub segment: u32,
    /// Byte offset in the segment.
    pub offset: u64,
    /// Byte length.
    pub len: u64,
    /// Presentation time, ns ([`NONE_TIME`]: none).
    pub pts: u64,
    /// Decoding time, ns ([`NONE_TIME`]: none).
    pub dts: u64,
    /// Duration, ns ([`NONE_TIME`]: none).
    pub duration: u64,
    /// GStreamer buffer flags.
    pub flags: u32,
    /// Buffers this consumer missed (on-full=drop) since the last buffer it got.
    pub missed: u64,
    /// Metas.
    pub metas: Vec<WireMeta>,
}

/// One protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// First message to a consumer.
    Hello {
        /// The producer's protocol version.
        version: u16,
        /// The consumer's number at this producer.
        consumer: u64,
        /// This consumer's back-pressure.
        on_full: OnFull,
        /// Buffers it may hold at once.
        max_held: u32,
    },
    /// A segment to map; its descriptor comes with the message.
    Segment {
        /// Segment id.
        id: u32,
        /// Bytes to map.
        size: u64,
    },
    /// The segment will not be named again: unmap it once no buffer uses it.
    SegmentGone {
        /// Segment id.
        id: u32,
    },
    /// Caps of the buffers that follow (GStreamer caps string).
    Caps(String),
    /// A buffer.
    Buffer(BufferMsg),
    /// End of stream.
    Eos,
    /// The producer failed (its message).
    Error(String),
    /// The consumer is done with these buffers.
    Release(Vec<u64>),
    /// Producer → consumer, after a [`Msg::RingRequest`]: its rings, the message region
    /// (read-only) and the release region as two descriptors with the message.
    Ring {
        /// Data bytes of the message ring.
        bytes: u32,
        /// Slots of the release ring.
        slots: u32,
    },
    /// Either way: the receiver announced that it sleeps and its ring has something.
    Wake,
    /// Consumer → producer: it reads rings ([`Msg::Ring`]); sent after the hello of a
    /// version 3 producer.
    RingRequest,
    /// The consumer's own back-pressure, instead of the producer's default: its
    /// `on-full`, and the buffers it may hold (0: the producer's limit; never more).
    Subscribe {
        /// What the producer does when this consumer is full.
        on_full: OnFull,
        /// Buffers it may hold at once.
        max_held: u32,
    },
}

/// A message that is not what the protocol allows: what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// Empty message.
    Empty,
    /// First byte names no message.
    UnknownType(u8),
    /// Shorter than its fields say.
    Truncated(&'static str),
    /// Bytes left after the last field.
    TrailingBytes(usize),
    /// A length over its cap.
    TooLong {
        /// Which field.
        what: &'static str,
        /// Its value.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// Text that is not UTF-8.
    NotUtf8(&'static str),
    /// A field out of range.
    Invalid(String),
    /// A buffer in a segment never announced (or already gone).
    UnknownSegment(u32),
    /// A buffer that does not lie within its segment.
    OutOfSegment {
        /// Segment id.
        segment: u32,
        /// Offset claimed.
        offset: u64,
        /// Length claimed.
        len: u64,
        /// The segment's size.
        size: u64,
    },
    /// A descriptor on a message that carries none, or none where one is needed.
    Descriptors {
        /// Message type.
        kind: &'static str,
        /// Descriptors that came.
        got: usize,
    },
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "an empty message"),
            Self::UnknownType(t) => write!(f, "unknown message type {t}"),
            Self::Truncated(w) => write!(f, "message cut short in its {w}"),
            Self::TrailingBytes(n) => write!(f, "{n} bytes after the message's last field"),
            Self::TooLong { what, len, max } => {
                write!(f, "{what} of {len} is over the limit of {max}")
            }
            Self::NotUtf8(w) => write!(f, "{w} is not UTF-8"),
            Self::Invalid(s) => f.write_str(s),
            Self::UnknownSegment(id) => write!(f, "a buffer in segment {id}, never announced"),
            Self::OutOfSegment {
                segment,
                offset,
                len,
                size,
            } => write!(
                f,
                "a buffer of {len} bytes at offset {offset} lies outside segment {segment} \
                 ({size} bytes)"
            ),
            Self::Descriptors { kind, got } => {
                write!(f, "{got} file descriptors came with a {kind} message")
            }
        }
    }
}

impl std::error::Error for ProtoError {}

/// Appends `msg`'s encoding to `out` (cleared first); an error when it would be longer
/// than [`MAX_MESSAGE`] or a list is over its cap (the caller leaves that meta out).
pub fn encode(msg: &Msg, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    out.clear();
    match msg {
        Msg::Hello {
            version,
            consumer,
            on_full,
            max_held,
        } => {
            out.push(HELLO);
            out.extend_from_slice(&MAGIC.to_le_bytes());
            out.extend_from_slice(&version.to_le_bytes());
            out.push(match on_full {
                OnFull::Block => 0,
                OnFull::Drop => 1,
            });
            out.extend_from_slice(&consumer.to_le_bytes());
            out.extend_from_slice(&max_held.to_le_bytes());
        }
        Msg::Segment { id, size } => {
            out.push(SEGMENT);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
        }
        Msg::SegmentGone { id } => {
            out.push(SEGMENT_GONE);
            out.extend_from_slice(&id.to_le_bytes());
        }
        Msg::Caps(s) => text(out, CAPS, s, "caps")?,
        Msg::Error(s) => text(out, ERROR, s, "error text")?,
        Msg::Eos => out.push(EOS),
        Msg::Ring { bytes, slots } => {
            out.push(RING);
            out.extend_from_slice(&bytes.to_le_bytes());
            out.extend_from_slice(&slots.to_le_bytes());
        }
        Msg::Wake => out.push(WAKE),
        Msg::RingRequest => out.push(RING_REQUEST),
        Msg::Buffer(b) => {
            out.push(BUFFER);
            out.extend_from_slice(&b.seq.to_le_bytes());
            out.extend_from_slice(&b.segment.to_le_bytes());
            for v in [b.offset, b.len, b.pts, b.dts, b.duration] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&b.flags.to_le_bytes());
            out.extend_from_slice(&b.missed.to_le_bytes());
            if b.metas.len() > MAX_METAS {
                return Err(too_long("metas", b.metas.len(), MAX_METAS));
            }
            out.extend_from_slice(&(b.metas.len() as u16).to_le_bytes());
            for m in &b.metas {
                encode_meta(m, out);
            }
        }
        Msg::Subscribe { on_full, max_held } => {
            out.push(SUBSCRIBE);
            out.push(match on_full {
                OnFull::Block => 0,
                OnFull::Drop => 1,
            });
            out.extend_from_slice(&max_held.to_le_bytes());
        }
        Msg::Release(seqs) => encode_release(seqs, out)?,
    }
    if out.len() > MAX_MESSAGE {
        return Err(too_long("message length", out.len(), MAX_MESSAGE));
    }
    Ok(())
}

/// Encodes a release of `seqs` into `out` (cleared first) without building a
/// [`Msg`]: the consumer's hot path. An error when `seqs` is over [`MAX_RELEASE`].
pub fn encode_release(seqs: &[u64], out: &mut Vec<u8>) -> Result<(), ProtoError> {
    if seqs.len() > MAX_RELEASE {
        return Err(too_long("release count", seqs.len(), MAX_RELEASE));
    }
    out.clear();
    out.push(RELEASE);
    out.extend_from_slice(&(seqs.len() as u16).to_le_bytes());
    for s in seqs {
        out.extend_from_slice(&s.to_le_bytes());
    }
    Ok(())
}

fn too_long(what: &'static str, len: usize, max: usize) -> ProtoError {
    ProtoError::TooLong {
        what,
        len: len as u64,
        max: max as u64,
    }
}

fn text(out: &mut Vec<u8>, tag: u8, s: &str, what: &'static str) -> Result<(), ProtoError> {
    if s.len() > MAX_TEXT {
        return Err(too_long(what, s.len(), MAX_TEXT));
    }
    out.push(tag);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn encode_meta(m: &WireMeta, out: &mut Vec<u8>) {
    let (tag, start) = (
        match m {
            WireMeta::Message(_) => meta_tag::MESSAGE,
            WireMeta::Packets(_) => meta_tag::PACKETS,
            WireMeta::Chunk(_) => meta_tag::CHUNK,
        },
        out.len(),
    );
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // body length, filled in below
    let body = out.len();
    match m {
        WireMeta::Message(m) => {
            out.extend_from_slice(&m.id.to_le_bytes());
            out.push(m.complete as u8);
            out.extend_from_slice(&m.bytes_expected.to_le_bytes());
            out.extend_from_slice(&m.bytes_received.to_le_bytes());
        }
        WireMeta::Packets(ps) => {
            out.extend_from_slice(&(ps.len() as u32).to_le_bytes());
            for p in ps {
                out.extend_from_slice(&p.offset.to_le_bytes());
                out.extend_from_slice(&p.len.to_le_bytes());
                out.extend_from_slice(&p.rx_time_ns.to_le_bytes());
                out.extend_from_slice(&p.ip);
                out.extend_from_slice(&p.port.to_le_bytes());
                out.push(p.v4 as u8);
            }
        }
        WireMeta::Chunk(c) => {
            for v in [
                c.chunk_id,
                c.slots,
                c.slot_size,
                c.slots_present,
                c.packets_per_slot,
                c.packets,
                c.bytes,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for words in [&c.present, &c.packet_present] {
                out.extend_from_slice(&(words.len() as u32).to_le_bytes());
                for w in words {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
        }
    }
    let len = (out.len() - body) as u32;
    out[start + 2..start + 6].copy_from_slice(&len.to_le_bytes());
}

/// A wire flag: 0 or 1, anything else an error naming `w`.
fn flag(v: u8, w: &'static str) -> Result<bool, ProtoError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(ProtoError::Invalid(format!("{w} is {v}, not 0 or 1"))),
    }
}

/// A cursor over a message that fails, naming the field, instead of reading past it.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.b.len() < n {
            return Err(ProtoError::Truncated(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, w: &'static str) -> Result<u8, ProtoError> {
        Ok(self.take(1, w)?[0])
    }
    fn u16(&mut self, w: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.take(2, w)?.try_into().expect("2")))
    }
    fn u32(&mut self, w: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4, w)?.try_into().expect("4")))
    }
    fn u64(&mut self, w: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8, w)?.try_into().expect("8")))
    }
    fn bool(&mut self, w: &'static str) -> Result<bool, ProtoError> {
        flag(self.u8(w)?, w)
    }
    fn text(&mut self, w: &'static str) -> Result<String, ProtoError> {
        let n = self.u32(w)? as usize;
        if n > MAX_TEXT {
            return Err(too_long(w, n, MAX_TEXT));
        }
        let b = self.take(n, w)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::NotUtf8(w))
    }
    /// A count of `each`-byte records that must fit in what is left.
    fn count(&mut self, each: usize, w: &'static str) -> Result<usize, ProtoError> {
        let n = self.u32(w)? as usize;
        if n.saturating_mul(each) > self.b.len() {
            return Err(ProtoError::Truncated(w));
        }
        Ok(n)
    }
    fn end(&self) -> Result<(), ProtoError> {
        match self.b.len() {
            0 => Ok(()),
            n => Err(ProtoError::TrailingBytes(n)),
        }
    }
}

/// Decodes one message, checking its own structure (lengths, caps on counts, UTF-8,
/// nothing left over). Segment and release checks need state: [`Consumer::accept`] and
/// the producer's hub.
pub fn decode(b: &[u8]) -> Result<Msg, ProtoError> {
    if b.len() > MAX_MESSAGE {
        return Err(too_long("message length", b.len(), MAX_MESSAGE));
    }
    let (&tag, rest) = b.split_first().ok_or(ProtoError::Empty)?;
    let mut r = Reader { b: rest };
    let msg = match tag {
        HELLO => {
            let magic = r.u32("magic")?;
            if magic != MAGIC {
                return Err(ProtoError::Invalid(format!(
                    "magic {magic:#x}: not a Firehose shared-memory producer"
                )));
            }
            let version = r.u16("version")?;
            if !(MIN_VERSION..=VERSION).contains(&version) {
                return Err(ProtoError::Invalid(format!(
                    "protocol version {version}, this side speaks {MIN_VERSION} to {VERSION}"
                )));
            }
            let on_full = match r.u8("on-full")? {
                0 => OnFull::Block,
                1 => OnFull::Drop,
                v => return Err(ProtoError::Invalid(format!("on-full {v}"))),
            };
            Msg::Hello {
                version,
                on_full,
                consumer: r.u64("consumer")?,
                max_held: r.u32("max-held")?,
            }
        }
        SEGMENT => {
            let id = r.u32("segment id")?;
            let size = r.u64("segment size")?;
            if size == 0 || size > MAX_SEGMENT {
                return Err(ProtoError::Invalid(format!(
                    "segment {id} of {size} bytes (allowed: 1 to {MAX_SEGMENT})"
                )));
            }
            Msg::Segment { id, size }
        }
        SEGMENT_GONE => Msg::SegmentGone {
            id: r.u32("segment id")?,
        },
        CAPS => Msg::Caps(r.text("caps")?),
        ERROR => Msg::Error(r.text("error text")?),
        EOS => Msg::Eos,
        RING => Msg::Ring {
            bytes: r.u32("ring bytes")?,
            slots: r.u32("ring slots")?,
        },
        WAKE => Msg::Wake,
        RING_REQUEST => Msg::RingRequest,
        BUFFER => {
            let mut m = BufferMsg {
                seq: r.u64("seq")?,
                segment: r.u32("segment")?,
                offset: r.u64("offset")?,
                len: r.u64("length")?,
                pts: r.u64("pts")?,
                dts: r.u64("dts")?,
                duration: r.u64("duration")?,
                flags: r.u32("flags")?,
                missed: r.u64("missed")?,
                metas: Vec::new(),
            };
            let n = r.u16("meta count")? as usize;
            if n > MAX_METAS {
                return Err(too_long("meta count", n, MAX_METAS));
            }
            for _ in 0..n {
                let tag = r.u16("meta tag")?;
                let len = r.u32("meta length")? as usize;
                let body = r.take(len, "meta body")?;
                if let Some(meta) = decode_meta(tag, body)? {
                    m.metas.push(meta);
                }
            }
            Msg::Buffer(m)
        }
        RELEASE => {
            let n = r.u16("release count")? as usize;
            if n > MAX_RELEASE {
                return Err(too_long("release count", n, MAX_RELEASE));
            }
            let mut seqs = Vec::with_capacity(n);
            for _ in 0..n {
                seqs.push(r.u64("released seq")?);
            }
            Msg::Release(seqs)
        }
        SUBSCRIBE => Msg::Subscribe {
            on_full: match r.u8("on-full")? {
                0 => OnFull::Block,
                1 => OnFull::Drop,
                v => return Err(ProtoError::Invalid(format!("on-full {v}"))),
            },
            max_held: r.u32("max-held")?,
        },
        BATCH => {
            return Err(ProtoError::Invalid(
                "a batch where one message was expected (a batch inside a batch?)".into(),
            ))
        }
        t => return Err(ProtoError::UnknownType(t)),
    };
    r.end()?;
    Ok(msg)
}

/// One meta's body; `None` for a tag this side does not know (skipped: a newer producer
/// may send metas an older consumer ignores).
fn decode_meta(tag: u16, body: &[u8]) -> Result<Option<WireMeta>, ProtoError> {
    let mut r = Reader { b: body };
    let m = match tag {
        meta_tag::MESSAGE => WireMeta::Message(MessageMeta {
            id: r.u64("message id")?,
            complete: r.bool("message complete")?,
            bytes_expected: r.u64("bytes expected")?,
            bytes_received: r.u64("bytes received")?,
        }),
        meta_tag::PACKETS => {
            let n = r.count(PACKET_BYTES, "packet count")?;
            // All the records at once (`count` checked that they fit), each read at
            // fixed offsets: no length check per field.
            let body = r.take(n * PACKET_BYTES, "packets")?;
            let mut ps = Vec::with_capacity(n);
            for c in body.chunks_exact(PACKET_BYTES) {
                let c: &[u8; PACKET_BYTES] = c.try_into().expect("chunks_exact");
                let v4 = flag(c[34], "packet v4")?;
                ps.push(PacketMeta {
                    offset: u32::from_le_bytes(c[0..4].try_into().expect("4")),
                    len: u32::from_le_bytes(c[4..8].try_into().expect("4")),
                    rx_time_ns: u64::from_le_bytes(c[8..16].try_into().expect("8")),
                    ip: c[16..32].try_into().expect("16"),
                    port: u16::from_le_bytes(c[32..34].try_into().expect("2")),
                    v4,
                });
            }
            WireMeta::Packets(ps)
        }
        meta_tag::CHUNK => {
            let mut c = ChunkMetaWire {
                chunk_id: r.u64("chunk id")?,
                slots: r.u64("chunk slots")?,
                slot_size: r.u64("chunk slot size")?,
                slots_present: r.u64("chunk slots present")?,
                packets_per_slot: r.u64("chunk packets per slot")?,
                packets: r.u64("chunk packets")?,
                bytes: r.u64("chunk bytes")?,
                ..Default::default()
            };
            for words in [&mut c.present, &mut c.packet_present] {
                let n = r.count(8, "chunk bitmap")?;
                words.reserve(n);
                for _ in 0..n {
                    words.push(r.u64("chunk bitmap word")?);
                }
            }
            if c.slots_present > c.slots {
                return Err(ProtoError::Invalid(format!(
                    "chunk with {} of {} slots present",
                    c.slots_present, c.slots
                )));
            }
            WireMeta::Chunk(c)
        }
        _ => return Ok(None),
    };
    r.end()?;
    Ok(Some(m))
}

/// Whether `b` is a batch of messages (read it with [`frames`]), not one message.
pub fn is_batch(b: &[u8]) -> bool {
    b.first() == Some(&BATCH)
}

/// The messages of a batch, each an undecoded message ([`decode`] it), in order.
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    b: &'a [u8],
    left: usize,
}

impl<'a> Iterator for Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Checked by `frames`: every length lies within the packet.
        let n = u32::from_le_bytes(self.b[..4].try_into().expect("4")) as usize;
        let (m, rest) = self.b[4..].split_at(n);
        self.b = rest;
        Some(m)
    }
}

impl Frames<'_> {
    /// Messages not yet read.
    pub fn left(&self) -> usize {
        self.left
    }
}

/// Checks a batch's whole framing and returns its messages: 1 to [`MAX_BATCH`] of them,
/// each non-empty and within the packet, nothing left after the last. A count or a
/// length that lies is an error before any message is read (the messages themselves
/// are checked as each is decoded).
pub fn frames(b: &[u8]) -> Result<Frames<'_>, ProtoError> {
    if b.len() > MAX_MESSAGE {
        return Err(too_long("message length", b.len(), MAX_MESSAGE));
    }
    let (&tag, rest) = b.split_first().ok_or(ProtoError::Empty)?;
    if tag != BATCH {
        return Err(ProtoError::Invalid(format!(
            "message type {tag} is not a batch"
        )));
    }
    let mut r = Reader { b: rest };
    let count = r.u16("batch count")? as usize;
    if count == 0 {
        return Err(ProtoError::Invalid("an empty batch".into()));
    }
    if count > MAX_BATCH {
        return Err(too_long("batch count", count, MAX_BATCH));
    }
    let body = r.b;
    for _ in 0..count {
        let n = r.u32("batch message length")? as usize;
        if n == 0 {
            return Err(ProtoError::Empty);
        }
        r.take(n, "batch message")?;
    }
    r.end()?;
    Ok(Frames {
        b: body,
        left: count,
    })
}

/// A batch being filled by the producer: messages appended as they are queued for one
/// consumer, sent in one packet ([`Batch::packet`]).
#[derive(Debug)]
pub struct Batch {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Batch {
    fn default() -> Self {
        let mut buf = Vec::with_capacity(MAX_MESSAGE);
        buf.extend_from_slice(&[BATCH, 0, 0]);
        Self { buf, count: 0 }
    }
}

impl Batch {
    /// Messages in it.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds no message.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether `msg` (an encoded message) fits: false when the batch holds
    /// [`MAX_BATCH`] messages or would grow over [`MAX_MESSAGE`].
    pub fn fits(&self, msg: &[u8]) -> bool {
        self.count < MAX_BATCH && self.buf.len() + 4 + msg.len() <= MAX_MESSAGE
    }

    /// Appends `msg` (an encoded message; check [`Batch::fits`] first) and returns
    /// where its bytes start in the batch (to patch a field, [`Batch::patch`]).
    pub fn push(&mut self, msg: &[u8]) -> usize {
        debug_assert!(self.fits(msg));
        self.buf
            .extend_from_slice(&(msg.len() as u32).to_le_bytes());
        let at = self.buf.len();
        self.buf.extend_from_slice(msg);
        self.count += 1;
        self.buf[1..3].copy_from_slice(&(self.count as u16).to_le_bytes());
        at
    }

    /// Overwrites bytes of a message pushed at `at`.
    pub fn patch(&mut self, at: usize, bytes: &[u8]) {
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// The packet to send: the one message alone when there is one (a batch only
    /// carries several), else the batch.
    pub fn packet(&self) -> &[u8] {
        match self.count {
            1 => &self.buf[BATCH_HEAD + 4..],
            _ => &self.buf,
        }
    }

    /// Empties it (after its packet was sent).
    pub fn clear(&mut self) {
        self.buf.truncate(BATCH_HEAD);
        self.buf[1..3].copy_from_slice(&[0, 0]);
        self.count = 0;
    }
}

/// Checks that a buffer's packet list lies within the buffer: every datagram's
/// `offset + len` at most `len`.
pub fn check_packets(packets: &[PacketMeta], len: u64) -> Result<(), ProtoError> {
    for (i, p) in packets.iter().enumerate() {
        if u64::from(p.offset) + u64::from(p.len) > len {
            return Err(ProtoError::Invalid(format!(
                "datagram {i} ({} bytes at {}) lies outside its {len}-byte buffer",
                p.len, p.offset
            )));
        }
    }
    Ok(())
}

/// What a consumer knows of its producer: the segments announced, so that each buffer
/// is checked to lie within one. No GStreamer, no mapping: the caller maps.
#[derive(Debug, Default)]
pub struct Consumer {
    segments: std::collections::HashMap<u32, u64>,
    hello: bool,
    ring: bool,
}

impl Consumer {
    /// Checks `msg` (decoded) against what came before, with `fds` descriptors attached,
    /// and records segments. Returns the message when it is acceptable.
    pub fn accept(&mut self, msg: Msg, fds: usize) -> Result<Msg, ProtoError> {
        let kind = match &msg {
            Msg::Hello { .. } => "hello",
            Msg::Segment { .. } => "segment",
            Msg::SegmentGone { .. } => "segment-gone",
            Msg::Caps(_) => "caps",
            Msg::Buffer(_) => "buffer",
            Msg::Eos => "eos",
            Msg::Error(_) => "error",
            Msg::Release(_) => "release",
            Msg::Subscribe { .. } => "subscribe",
            Msg::Ring { .. } => "ring",
            Msg::Wake => "wake",
            Msg::RingRequest => "ring-request",
        };
        let want = match msg {
            Msg::Segment { .. } => 1,
            Msg::Ring { .. } => 2,
            _ => 0,
        };
        if fds != want {
            return Err(ProtoError::Descriptors { kind, got: fds });
        }
        // An error may come first: a producer that refuses a consumer says why.
        if !self.hello && !matches!(msg, Msg::Hello { .. } | Msg::Error(_)) {
            return Err(ProtoError::Invalid(format!(
                "a {kind} message before the hello"
            )));
        }
        match &msg {
            Msg::Hello { .. } if self.hello => {
                return Err(ProtoError::Invalid("a second hello".into()))
            }
            Msg::Hello { .. } => self.hello = true,
            Msg::Segment { id, size } => {
                if self.segments.contains_key(id) {
                    return Err(ProtoError::Invalid(format!("segment {id} announced twice")));
                }
                if self.segments.len() >= MAX_SEGMENTS {
                    return Err(too_long("segments mapped", MAX_SEGMENTS + 1, MAX_SEGMENTS));
                }
                self.segments.insert(*id, *size);
            }
            Msg::SegmentGone { id } => {
                if self.segments.remove(id).is_none() {
                    return Err(ProtoError::UnknownSegment(*id));
                }
            }
            Msg::Buffer(b) => {
                let size = *self
                    .segments
                    .get(&b.segment)
                    .ok_or(ProtoError::UnknownSegment(b.segment))?;
                if b.offset.checked_add(b.len).is_none_or(|end| end > size) {
                    return Err(ProtoError::OutOfSegment {
                        segment: b.segment,
                        offset: b.offset,
                        len: b.len,
                        size,
                    });
                }
                for m in &b.metas {
                    if let WireMeta::Packets(ps) = m {
                        check_packets(ps, b.len)?;
                    }
                }
            }
            Msg::Ring { .. } if self.ring => {
                return Err(ProtoError::Invalid("a second ring".into()))
            }
            Msg::Ring { .. } => self.ring = true,
            Msg::Release(_) | Msg::Subscribe { .. } | Msg::RingRequest => {
                return Err(ProtoError::Invalid(format!(
                    "a {kind} message from the producer"
                )))
            }
            Msg::Caps(_) | Msg::Eos | Msg::Error(_) | Msg::Wake => {}
        }
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer() -> BufferMsg {
        BufferMsg {
            seq: 7,
            segment: 2,
            offset: 4096,
            len: 1000,
            pts: 5,
            dts: NONE_TIME,
            duration: 3,
            flags: 0x40,
            missed: 11,
            metas: vec![
                WireMeta::Message(MessageMeta {
                    id: 99,
                    complete: true,
                    bytes_expected: 1000,
                    bytes_received: 1000,
                }),
                WireMeta::Packets(vec![
                    PacketMeta {
                        offset: 0,
                        len: 500,
                        rx_time_ns: 12,
                        ip: [1; 16],
                        port: 9,
                        v4: true,
                    },
                    PacketMeta {
                        offset: 512,
                        len: 488,
                        ..Default::default()
                    },
                ]),
                WireMeta::Chunk(ChunkMetaWire {
                    chunk_id: 4,
                    slots: 3,
                    slot_size: 300,
                    slots_present: 2,
                    present: vec![0b101],
                    ..Default::default()
                }),
            ],
        }
    }

    fn all() -> Vec<Msg> {
        vec![
            Msg::Hello {
                version: VERSION,
                consumer: 3,
                on_full: OnFull::Drop,
                max_held: 16,
            },
            Msg::Segment { id: 2, size: 8192 },
            Msg::Ring {
                bytes: 1 << 18,
                slots: 4096,
            },
            Msg::Wake,
            Msg::RingRequest,
            Msg::Caps("application/x-test, a=(int)1".into()),
            Msg::Buffer(buffer()),
            Msg::SegmentGone { id: 2 },
            Msg::Eos,
            Msg::Error("disk on fire".into()),
            Msg::Release(vec![1, 2, u64::MAX]),
            Msg::Subscribe {
                on_full: OnFull::Drop,
                max_held: 3,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        let mut out = Vec::new();
        for m in all() {
            encode(&m, &mut out).unwrap();
            assert_eq!(decode(&out).unwrap(), m);
        }
    }

    #[test]
    fn every_cut_is_an_error_never_a_panic() {
        let mut out = Vec::new();
        for m in all() {
            encode(&m, &mut out).unwrap();
            for cut in 0..out.len() {
                assert!(decode(&out[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = out.clone();
            long.push(0);
            assert_eq!(decode(&long), Err(ProtoError::TrailingBytes(1)), "{m:?}");
        }
    }

    #[test]
    fn lies_in_lengths_and_counts_are_refused() {
        let mut out = Vec::new();
        encode(&Msg::Caps("abc".into()), &mut out).unwrap();
        out[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&out), Err(ProtoError::TooLong { .. })));
        encode(&Msg::Release(vec![1]), &mut out).unwrap();
        out[1..3].copy_from_slice(&60000u16.to_le_bytes());
        assert!(matches!(decode(&out), Err(ProtoError::TooLong { .. })));
        encode(&Msg::Caps("abc".into()), &mut out).unwrap();
        out[5] = 0xff;
        assert_eq!(decode(&out), Err(ProtoError::NotUtf8("caps")));
        assert_eq!(decode(&[200]), Err(ProtoError::UnknownType(200)));
        assert_eq!(decode(&[]), Err(ProtoError::Empty));
        assert!(decode(&vec![BUFFER; MAX_MESSAGE + 1]).is_err());
        // A packet count far larger than the meta body.
        let mut b = buffer();
        b.metas = vec![WireMeta::Packets(vec![PacketMeta::default()])];
        encode(&Msg::Buffer(b), &mut out).unwrap();
        let count_at = out.len() - PACKET_BYTES - 4;
        out[count_at..count_at + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
        assert_eq!(decode(&out), Err(ProtoError::Truncated("packet count")));
        // A v4 flag that is neither 0 nor 1, in the last of several packets; each field
        // of a packet read back from its place.
        let p = PacketMeta {
            offset: 0x0102_0304,
            len: 0x0506_0708,
            rx_time_ns: 0x1112_1314_1516_1718,
            ip: std::array::from_fn(|i| i as u8 + 0x20),
            port: 0x3132,
            v4: true,
        };
        let mut b = buffer();
        b.metas = vec![WireMeta::Packets(vec![PacketMeta::default(), p])];
        encode(&Msg::Buffer(b.clone()), &mut out).unwrap();
        assert_eq!(decode(&out).unwrap(), Msg::Buffer(b));
        *out.last_mut().unwrap() = 2;
        assert_eq!(
            decode(&out),
            Err(ProtoError::Invalid("packet v4 is 2, not 0 or 1".into()))
        );
        // A segment of 0 bytes, or of more than a consumer maps.
        for size in [0, MAX_SEGMENT + 1] {
            encode(&Msg::Segment { id: 1, size: 1 }, &mut out).unwrap();
            out[5..13].copy_from_slice(&size.to_le_bytes());
            assert!(matches!(decode(&out), Err(ProtoError::Invalid(_))));
        }
        // A hello from something else, or another version.
        encode(&all()[0], &mut out).unwrap();
        out[1] ^= 1;
        assert!(matches!(decode(&out), Err(ProtoError::Invalid(_))));
    }

    #[test]
    fn unknown_metas_are_skipped() {
        let mut out = Vec::new();
        let mut b = buffer();
        b.metas.truncate(1);
        encode(&Msg::Buffer(b.clone()), &mut out).unwrap();
        // Rewrite the meta's tag to one nobody knows: the buffer decodes without it.
        let tag_at = out.len() - (8 + 1 + 8 + 8) - 6;
        out[tag_at..tag_at + 2].copy_from_slice(&999u16.to_le_bytes());
        b.metas.clear();
        assert_eq!(decode(&out).unwrap(), Msg::Buffer(b));
    }

    #[test]
    fn the_consumer_checks_buffers_against_announced_segments() {
        let mut c = Consumer::default();
        let hello = all()[0].clone();
        let seg = Msg::Segment { id: 2, size: 8192 };
        assert!(matches!(
            c.accept(seg.clone(), 1),
            Err(ProtoError::Invalid(_))
        ));
        c.accept(hello.clone(), 0).unwrap();
        assert!(c.accept(hello, 0).is_err(), "a second hello");
        assert_eq!(
            c.accept(seg.clone(), 0),
            Err(ProtoError::Descriptors {
                kind: "segment",
                got: 0
            })
        );
        c.accept(seg.clone(), 1).unwrap();
        assert!(c.accept(seg, 1).is_err(), "announced twice");
        let ok = buffer();
        c.accept(Msg::Buffer(ok.clone()), 0).unwrap();
        assert!(matches!(
            c.accept(Msg::Buffer(ok.clone()), 1),
            Err(ProtoError::Descriptors { .. })
        ));
        for (offset, len) in [(8000, 193), (u64::MAX, 2), (0, 8193)] {
            let lie = BufferMsg {
                offset,
                len,
                metas: vec![],
                ..ok.clone()
            };
            assert!(
                matches!(
                    c.accept(Msg::Buffer(lie), 0),
                    Err(ProtoError::OutOfSegment { .. })
                ),
                "{offset}+{len}"
            );
        }
        let other = BufferMsg {
            segment: 3,
            ..ok.clone()
        };
        assert_eq!(
            c.accept(Msg::Buffer(other), 0),
            Err(ProtoError::UnknownSegment(3))
        );
        let bad_packets = BufferMsg {
            metas: vec![WireMeta::Packets(vec![PacketMeta {
                offset: 900,
                len: 101,
                ..Default::default()
            }])],
            ..ok.clone()
        };
        assert!(matches!(
            c.accept(Msg::Buffer(bad_packets), 0),
            Err(ProtoError::Invalid(_))
        ));
        c.accept(Msg::SegmentGone { id: 2 }, 0).unwrap();
        assert_eq!(
            c.accept(Msg::Buffer(ok), 0),
            Err(ProtoError::UnknownSegment(2))
        );
        assert!(c.accept(Msg::Release(vec![1]), 0).is_err());
    }

    fn batch_of(msgs: &[Msg]) -> Vec<u8> {
        let mut b = Batch::default();
        let mut out = Vec::new();
        for m in msgs {
            encode(m, &mut out).unwrap();
            assert!(b.fits(&out));
            b.push(&out);
        }
        b.packet().to_vec()
    }

    #[test]
    fn several_messages_travel_in_one_batch_in_order() {
        let mut second = buffer();
        second.seq = 8;
        let msgs = vec![
            Msg::Caps("a/b".into()),
            Msg::Buffer(buffer()),
            Msg::Buffer(second),
            Msg::Eos,
        ];
        let packet = batch_of(&msgs);
        assert!(is_batch(&packet));
        let f = frames(&packet).unwrap();
        assert_eq!(f.left(), 4);
        let got: Vec<Msg> = f.map(|m| decode(m).unwrap()).collect();
        assert_eq!(got, msgs);
        // One message is sent alone, as before batches.
        let one = batch_of(&msgs[1..2]);
        assert!(!is_batch(&one));
        assert_eq!(decode(&one).unwrap(), msgs[1]);
        // A batch is never read as one message.
        assert!(matches!(decode(&packet), Err(ProtoError::Invalid(_))));
    }

    #[test]
    fn a_batch_fills_up_and_clears() {
        let mut b = Batch::default();
        let mut out = Vec::new();
        encode(&Msg::Eos, &mut out).unwrap();
        while b.fits(&out) {
            b.push(&out);
        }
        assert_eq!(b.len(), MAX_BATCH);
        assert_eq!(frames(b.packet()).unwrap().count(), MAX_BATCH);
        b.clear();
        assert!(b.is_empty());
        let big = vec![CAPS; MAX_MESSAGE - 6];
        assert!(!b.fits(&big), "over MAX_MESSAGE with its framing");
        let at = b.push(&out);
        b.patch(at, &[ERROR]);
        assert_eq!(b.packet(), &[ERROR]);
    }

    #[test]
    fn truncated_or_lying_batches_are_refused_before_any_message_is_read() {
        let packet = batch_of(&[Msg::Buffer(buffer()), Msg::Eos, Msg::Caps("x".into())]);
        // Every cut: an error, never a panic, never a partial batch.
        for cut in 0..packet.len() {
            assert!(frames(&packet[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = packet.clone();
        long.push(0);
        assert_eq!(frames(&long).unwrap_err(), ProtoError::TrailingBytes(1));
        // A count that says more, or fewer, messages than the packet holds.
        for count in [4u16, 2, 60000] {
            let mut lie = packet.clone();
            lie[1..3].copy_from_slice(&count.to_le_bytes());
            assert!(frames(&lie).is_err(), "count {count}");
        }
        let mut zero = packet.clone();
        zero[1..3].copy_from_slice(&0u16.to_le_bytes());
        assert!(matches!(frames(&zero), Err(ProtoError::Invalid(_))));
        // A length that runs past the packet, or a zero length.
        for len in [u32::MAX, 10_000, 0] {
            let mut lie = packet.clone();
            lie[3..7].copy_from_slice(&len.to_le_bytes());
            assert!(frames(&lie).is_err(), "length {len}");
        }
        // Over the message cap, and a batch inside a batch.
        assert!(frames(&vec![BATCH; MAX_MESSAGE + 1]).is_err());
        let inner = packet.clone();
        let mut b = Batch::default();
        b.push(&inner);
        b.push(&inner);
        let nested = b.packet().to_vec();
        for m in frames(&nested).unwrap() {
            assert!(decode(m).is_err(), "a nested batch is not a message");
        }
        // A buffer lie inside a well-framed batch is still caught by the consumer.
        let mut c = Consumer::default();
        c.accept(all()[0].clone(), 0).unwrap();
        let lie = BufferMsg {
            segment: 9,
            ..buffer()
        };
        let packet = batch_of(&[Msg::Buffer(lie)]);
        let m = decode(&packet).unwrap();
        assert_eq!(c.accept(m, 0), Err(ProtoError::UnknownSegment(9)));
    }
}
