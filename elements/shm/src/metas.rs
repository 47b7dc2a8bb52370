//! Firehose's buffer metas to and from their wire form ([`crate::proto::WireMeta`]): the
//! message meta, the packet batch meta and the chunk meta. Other metas do not travel.

use std::net::IpAddr;

use firehose_core::meta::chunk::{ChunkInfo, ChunkMeta};
use firehose_core::meta::message::{self, Message};
use firehose_core::{PacketAddr, PacketBatchMeta, PacketInfo};

use crate::proto::{ChunkMetaWire, MessageMeta, PacketMeta, WireMeta};

/// Appends the wire form of `buf`'s Firehose metas to `out`.
pub fn read(buf: &gst::BufferRef, out: &mut Vec<WireMeta>) {
    read_reusing(buf, out, &mut Vec::new());
}

/// [`read`], filling `spare` (cleared first) for a packet list instead of a new vector:
/// with [`recycle`] after the message is sent, no allocation per buffer.
pub fn read_reusing(buf: &gst::BufferRef, out: &mut Vec<WireMeta>, spare: &mut Vec<PacketMeta>) {
    if let Some(m) = message::read(buf) {
        out.push(WireMeta::Message(MessageMeta {
            id: m.id,
            complete: m.complete,
            bytes_expected: m.bytes_expected,
            bytes_received: m.bytes_received,
        }));
    }
    if let Some(b) = buf.meta::<PacketBatchMeta>() {
        let mut list = std::mem::take(spare);
        list.clear();
        list.extend(b.packets().iter().map(|p| {
            let a = p.src.to_socket_addr();
            let (ip, v4) = match a.ip() {
                IpAddr::V4(v) => (v.to_ipv6_mapped().octets(), true),
                IpAddr::V6(v) => (v.octets(), false),
            };
            PacketMeta {
                offset: p.offset,
                len: p.len,
                rx_time_ns: p.rx_time_ns,
                ip,
                port: a.port(),
                v4,
            }
        }));
        out.push(WireMeta::Packets(list));
    }
    if let Some(c) = buf.meta::<ChunkMeta>() {
        let c = c.info();
        out.push(WireMeta::Chunk(ChunkMetaWire {
            chunk_id: c.chunk_id,
            slots: c.slots as u64,
            slot_size: c.slot_size as u64,
            slots_present: c.slots_present as u64,
            packets_per_slot: c.packets_per_slot as u64,
            packets: c.packets,
            bytes: c.bytes,
            present: c.present.clone(),
            packet_present: c.packet_present.clone(),
        }));
    }
}

/// Empties `metas` (keeping its capacity), keeping a packet list's vector in `spare`
/// for the next [`read_reusing`].
pub fn recycle(metas: &mut Vec<WireMeta>, spare: &mut Vec<PacketMeta>) {
    for m in metas.drain(..) {
        if let WireMeta::Packets(v) = m {
            *spare = v;
        }
    }
}

// `packet_infos` converts in place only while the two have one size and alignment.
const _: () = assert!(
    std::mem::size_of::<PacketMeta>() == std::mem::size_of::<PacketInfo>()
        && std::mem::align_of::<PacketMeta>() == std::mem::align_of::<PacketInfo>()
);

/// The packet list of a batch as the meta holds it, converted in place: a `PacketMeta`
/// and a `PacketInfo` have one size and alignment, so the decoded list's allocation
/// becomes the meta's (no allocation, one pass).
fn packet_infos(ps: Vec<PacketMeta>) -> Vec<PacketInfo> {
    ps.into_iter()
        .map(|p| PacketInfo {
            offset: p.offset,
            len: p.len,
            rx_time_ns: p.rx_time_ns,
            src: PacketAddr::from_octets(p.ip, p.port, p.v4),
        })
        .collect()
}

/// Attaches `metas` to `buf`; with `readable`, a packet batch also gets its
/// `FirehoseBatchMeta` (the metas every language reads). A chunk's readable meta does
/// not travel: its per-slot byte counts are not on the wire.
pub fn write(buf: &mut gst::BufferRef, metas: Vec<WireMeta>, readable: bool) {
    for m in metas {
        match m {
            WireMeta::Message(m) => message::add(
                buf,
                &Message {
                    id: m.id,
                    complete: m.complete,
                    bytes_expected: m.bytes_expected,
                    bytes_received: m.bytes_received,
                },
            ),
            WireMeta::Packets(ps) => {
                let packets = packet_infos(ps);
                if readable {
                    firehose_core::meta::readable::add_batch(buf, &packets, None);
                }
                PacketBatchMeta::add(buf, packets);
            }
            WireMeta::Chunk(c) => {
                ChunkMeta::add(
                    buf,
                    ChunkInfo {
                        chunk_id: c.chunk_id,
                        slots: c.slots as usize,
                        slot_size: c.slot_size as usize,
                        present: c.present,
                        slots_present: c.slots_present as usize,
                        packets_per_slot: c.packets_per_slot as usize,
                        packet_present: c.packet_present,
                        packets: c.packets,
                        bytes: c.bytes,
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn packet_list_converts_in_place_and_keeps_addresses() {
        let addrs = ["10.1.2.3:7148", "[fe80::1]:9", "[::ffff:10.0.0.1]:5"];
        let ps: Vec<PacketMeta> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let a = a.parse::<SocketAddr>().unwrap();
                let (ip, port) = PacketAddr::from(a).octets();
                PacketMeta {
                    offset: i as u32 * 100,
                    len: 40,
                    rx_time_ns: i as u64,
                    ip,
                    port,
                    v4: a.is_ipv4(),
                }
            })
            .collect();
        let at = ps.as_ptr() as usize;
        let infos = packet_infos(ps);
        assert_eq!(infos.as_ptr() as usize, at, "no new allocation");
        for (i, (p, a)) in infos.iter().zip(addrs).enumerate() {
            assert_eq!(p.src.to_socket_addr(), a.parse::<SocketAddr>().unwrap());
            assert_eq!(
                (p.offset, p.len, p.rx_time_ns),
                (i as u32 * 100, 40, i as u64)
            );
        }
        // A v4 flag on an address that is not IPv4-mapped stays IPv6.
        let (ip, port) = PacketAddr::from("[fe80::1]:9".parse::<SocketAddr>().unwrap()).octets();
        let odd = packet_infos(vec![PacketMeta {
            ip,
            port,
            v4: true,
            ..Default::default()
        }]);
        assert_eq!(odd[0].src.to_socket_addr().to_string(), "[fe80::1]:9");
    }

    #[test]
    fn firehose_metas_survive_the_trip() {
        gst::init().unwrap();
        message::register();
        let mut buf = gst::Buffer::from_slice(vec![0u8; 100]);
        let packets = vec![
            PacketInfo {
                offset: 0,
                len: 40,
                rx_time_ns: 17,
                src: PacketAddr::from("10.1.2.3:7148".parse::<SocketAddr>().unwrap()),
            },
            PacketInfo {
                offset: 64,
                len: 36,
                rx_time_ns: 18,
                src: PacketAddr::from("[fe80::1]:9".parse::<SocketAddr>().unwrap()),
            },
        ];
        let chunk = ChunkInfo {
            chunk_id: 3,
            slots: 2,
            slot_size: 50,
            present: vec![1],
            slots_present: 1,
            packets_per_slot: 0,
            packet_present: vec![],
            packets: 1,
            bytes: 40,
        };
        let msg = Message {
            id: 42,
            complete: false,
            bytes_expected: 100,
            bytes_received: 76,
        };
        {
            let b = buf.get_mut().unwrap();
            message::add(b, &msg);
            PacketBatchMeta::add(b, packets.clone());
            ChunkMeta::add(b, chunk.clone());
        }
        let mut wire = Vec::new();
        read(&buf, &mut wire);
        assert_eq!(wire.len(), 3);
        let mut out = gst::Buffer::new();
        write(out.get_mut().unwrap(), wire.clone(), false);
        assert!(firehose_core::meta::readable::batch(&out).is_none());
        let mut readable = gst::Buffer::new();
        write(readable.get_mut().unwrap(), wire, true);
        let r = firehose_core::meta::readable::batch(&readable).expect("readable batch meta");
        assert_eq!(r.get::<u64>("packets"), Ok(packets.len() as u64));
        assert_eq!(message::read(&out), Some(msg));
        assert_eq!(
            out.meta::<PacketBatchMeta>().unwrap().packets(),
            &packets[..]
        );
        assert_eq!(out.meta::<ChunkMeta>().unwrap().info(), &chunk);
    }
}
