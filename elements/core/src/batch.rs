//! The packet-batch meta: where each datagram of a batch buffer sits, who sent it and
//! when it arrived.
//!
//! A batch buffer holds many datagrams in one pool slot (one `recvmmsg`, one push). The
//! meta lists, per datagram, its byte offset and length inside the buffer, its source
//! address and its receive time. [`PacketInfo`] and [`PacketAddr`] are plain
//! data (`crate::packet`, which the other metas use too without depending on this
//! module); [`PacketBatchMeta`] attaches a list of them to a `gst::Buffer`.

pub use crate::packet::{PacketAddr, PacketInfo};

crate::rust_meta! {
    /// The meta attached to `application/x-firehose-packets` buffers: the datagrams of
    /// the batch, in arrival order.
    pub struct PacketBatchMeta(Vec<PacketInfo>), api = c"FirehosePacketBatchMetaAPI", name = c"FirehosePacketBatchMeta", transform = transform_packets;
}

impl PacketBatchMeta {
    /// The datagrams of the batch, in arrival order.
    pub fn packets(&self) -> &[PacketInfo] {
        self.data()
    }
}

/// Full copies keep every datagram; region copies keep those wholly inside the region,
/// with offsets rebased to it.
#[allow(clippy::ptr_arg)] // the signature is the meta's TransformFn<Vec<PacketInfo>>
fn transform_packets(
    packets: &Vec<PacketInfo>,
    region: Option<(usize, usize)>,
) -> Option<Vec<PacketInfo>> {
    Some(match region {
        None => packets.clone(),
        Some((start, size)) => packets
            .iter()
            .filter(|p| p.offset as usize >= start && p.range().end <= start + size)
            .map(|p| PacketInfo {
                offset: (p.offset as usize - start) as u32,
                ..*p
            })
            .collect(),
    })
}

/// An `application/x-firehose-packets` buffer: `memory` (its only memory, so that
/// downstream maps it without a merge), the batch meta over `packets`, and `pts`; with
/// `readable` (the `readable-metas` property), also the batch meta every language reads
/// ([`crate::meta::readable`]). What every packet source pushes per batch.
pub fn batch_buffer(
    memory: gst::Memory,
    packets: Vec<PacketInfo>,
    pts: Option<gst::ClockTime>,
    readable: bool,
) -> gst::Buffer {
    let mut buffer = gst::Buffer::new();
    {
        let b = buffer.get_mut().expect("a new buffer is writable");
        b.append_memory(memory);
        b.set_pts(pts);
        if readable {
            crate::meta::readable::add_batch(b, &packets, None);
        }
        PacketBatchMeta::add(b, packets);
    }
    buffer
}

/// [`batch_buffer`] for a source that knows where each datagram was sent: also the
/// [`PacketDestMeta`](crate::meta::dest::PacketDestMeta) over `dests` (one per packet),
/// and, with `readable`, the destinations in the batch meta every language reads.
pub fn batch_buffer_with_dests(
    memory: gst::Memory,
    packets: Vec<PacketInfo>,
    dests: Vec<crate::meta::dest::PacketDest>,
    pts: Option<gst::ClockTime>,
    readable: bool,
) -> gst::Buffer {
    let mut buffer = gst::Buffer::new();
    {
        let b = buffer.get_mut().expect("a new buffer is writable");
        b.append_memory(memory);
        b.set_pts(pts);
        if readable {
            crate::meta::readable::add_batch(b, &packets, Some(&dests));
        }
        PacketBatchMeta::add(b, packets);
        crate::meta::dest::PacketDestMeta::add(b, dests);
    }
    buffer
}

/// Nanoseconds since the Unix epoch now (0 if the clock is before it): the wall-clock
/// receive time sources stamp on a batch's packets, and recorders on what they write.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Calls `f` with each datagram's bytes of a batch buffer (one map for the batch).
/// Returns the number of datagrams, or `None` if the buffer has no batch meta.
pub fn for_each_packet(
    buf: &gst::BufferRef,
    mut f: impl FnMut(&PacketInfo, &[u8]),
) -> Option<usize> {
    let meta = buf.meta::<PacketBatchMeta>()?;
    let map = buf.map_readable().ok()?;
    let data = map.as_slice();
    let mut n = 0;
    for p in meta.packets() {
        if let Some(bytes) = data.get(p.range()) {
            f(p, bytes);
            n += 1;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn info(offset: u32, len: u32) -> PacketInfo {
        PacketInfo {
            offset,
            len,
            rx_time_ns: 7,
            src: "127.0.0.1:5000".parse::<SocketAddr>().unwrap().into(),
        }
    }

    #[test]
    fn meta_survives_copy_and_region_copy() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::from_slice(b"aaaabbbbbbcc".to_vec());
        PacketBatchMeta::add(
            buf.get_mut().unwrap(),
            vec![info(0, 4), info(4, 6), info(10, 2)],
        );
        let mut seen = Vec::new();
        let n = for_each_packet(&buf, |_, b| seen.push(b.to_vec())).unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            seen,
            vec![b"aaaa".to_vec(), b"bbbbbb".to_vec(), b"cc".to_vec()]
        );

        let copy = buf.copy();
        assert_eq!(copy.meta::<PacketBatchMeta>().unwrap().packets().len(), 3);

        let region = buf.copy_region(gst::BufferCopyFlags::all(), 4..12).unwrap();
        let m = region.meta::<PacketBatchMeta>().unwrap();
        assert_eq!(m.packets(), &[info(0, 6), info(6, 2)]);
    }

    #[test]
    fn plain_buffer_has_no_batch() {
        gst::init().unwrap();
        let buf = gst::Buffer::from_slice(vec![0u8; 4]);
        assert!(for_each_packet(&buf, |_, _| {}).is_none());
    }
}
