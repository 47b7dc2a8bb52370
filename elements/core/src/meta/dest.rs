//! Where each datagram of a batch was sent, and where its own frame headers are: the
//! [`PacketDestMeta`], beside the [`PacketBatchMeta`](crate::PacketBatchMeta).
//!
//! The batch meta says who sent each datagram; a recording also needs where it went.
//! A frame-level source (`fhxdpsrc`, `fhibvsrc`, `fhdpdksrc`) reads the destination from
//! the frame, and the frame's Ethernet, IP and UDP headers lie in the buffer just before
//! the payload, so a recorder can write them as they were (real MACs, IP id, TTL, VLAN
//! tags). A socket source knows the destination from `IP_PKTINFO` (wildcard binds) or
//! its bound address, and has no headers. Entry `i` describes datagram `i` of the batch meta.

use crate::frame::{datagram, LINKTYPE_ETHERNET};
use crate::packet::PacketAddr;

/// Where one datagram was sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketDest {
    /// Destination address and port (unspecified, port 0: not known).
    pub dst: PacketAddr,
    /// Bytes of the datagram's own Ethernet + IP + UDP headers lying in the buffer right
    /// before its payload (0: not in the buffer).
    pub header_len: u16,
}

crate::rust_meta! {
    /// The destinations of a batch's datagrams, in the batch meta's order.
    pub struct PacketDestMeta(Vec<PacketDest>), api = c"FirehosePacketDestMetaAPI", name = c"FirehosePacketDestMeta", transform = transform_dests;
}

impl PacketDestMeta {
    /// One entry per datagram of the batch meta, in its order.
    pub fn dests(&self) -> &[PacketDest] {
        self.data()
    }
}

/// Full copies keep the entries; a region copy may leave datagrams out of the batch
/// meta, so the entries would no longer line up: the copy goes without.
#[allow(clippy::ptr_arg)] // the signature is the meta's TransformFn<Vec<PacketDest>>
fn transform_dests(d: &Vec<PacketDest>, region: Option<(usize, usize)>) -> Option<Vec<PacketDest>> {
    match region {
        None => Some(d.clone()),
        Some(_) => None,
    }
}

/// The frame headers of the datagram whose payload is `data[offset..offset + len]`, if
/// `header_len` bytes before it are an Ethernet frame's headers whose UDP payload is
/// exactly those `len` bytes. A recorder checks this before writing headers it did not
/// make itself: a meta that no longer matches its buffer (an element that rearranged
/// the bytes) must not put another datagram's bytes in a recording as headers.
pub fn frame_headers(data: &[u8], offset: usize, len: usize, header_len: u16) -> Option<&[u8]> {
    let hl = usize::from(header_len);
    let start = offset.checked_sub(hl).filter(|_| hl > 0)?;
    let frame = data.get(start..offset.checked_add(len)?)?;
    let d = datagram(LINKTYPE_ETHERNET, frame).ok()?;
    (d.payload.len() == len && d.payload_offset(frame) == Some(hl)).then(|| &frame[..hl])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::build::{write_ipv4_udp, Macs, IPV6_UDP_HEADERS};
    use std::net::SocketAddr;

    fn frame(payload: &[u8]) -> (Vec<u8>, usize) {
        let mut f = vec![0u8; IPV6_UDP_HEADERS];
        let n = write_ipv4_udp(
            &mut f,
            Macs {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
            },
            "10.0.0.1:5".parse().unwrap(),
            "10.211.0.1:7148".parse().unwrap(),
            payload.len(),
            77,
            64,
        );
        f.truncate(n);
        f.extend_from_slice(payload);
        (f, n)
    }

    #[test]
    fn headers_are_found_only_where_they_match_the_payload() {
        let mut data = b"previous datagram".to_vec();
        let at = data.len();
        let (f, hl) = frame(b"payload!");
        data.extend_from_slice(&f);
        let off = at + hl;
        assert_eq!(
            frame_headers(&data, off, 8, hl as u16),
            Some(&f[..hl]),
            "the frame's own headers"
        );
        assert_eq!(
            frame_headers(&data, off, 7, hl as u16),
            None,
            "wrong length"
        );
        assert_eq!(frame_headers(&data, off, 8, 0), None, "no headers");
        assert_eq!(
            frame_headers(&data, off, 8, hl as u16 + 4),
            None,
            "misplaced"
        );
        assert_eq!(frame_headers(&data, 3, 8, 20), None, "before the buffer");
        assert_eq!(
            frame_headers(&data, off, 100, hl as u16),
            None,
            "past the end"
        );
        // Payload bytes that merely precede another payload are not headers.
        let packed = [b"abcdefgh".as_slice(), b"payload!"].concat();
        assert_eq!(frame_headers(&packed, 8, 8, 8), None);
    }

    #[test]
    fn region_copies_go_without() {
        let d = vec![PacketDest {
            dst: "10.211.0.1:7148".parse::<SocketAddr>().unwrap().into(),
            header_len: 42,
        }];
        assert_eq!(transform_dests(&d, None), Some(d.clone()));
        assert_eq!(transform_dests(&d, Some((0, 10))), None);
    }
}
