//! The seam between transports and engines, without GStreamer types.
//!
//! A [`Transport`] receives batches of datagrams into memory it is handed (kernel UDP,
//! AF_XDP, DPDK, a capture file, a generator). An [`Engine`] turns batches into what a
//! pipeline carries (heap reassembly, chunk placement) and takes them from any
//! transport, or from several in turn: the form one stream received over several
//! sockets, multicast groups or NIC queues takes (spead2's several readers feeding one
//! stream). Packet sources are elements over a transport (`crate::src::PacketSrc`);
//! the receive groups of the many-threads work feed one engine from several.

use std::io;

use crate::PacketInfo;

/// What one [`Transport::receive`] brought.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Datagrams, each listed in the packet list; the first `used` bytes of the slot
    /// hold them.
    Batch {
        /// Bytes of the slot written.
        used: usize,
    },
    /// Nothing for the engine: the wait ended empty, or every datagram was dropped and
    /// counted by the transport (truncated, empty).
    Nothing,
    /// The transport's waker fired (stop, flush, EOS).
    Interrupted,
}

/// Something that receives batches of datagrams into memory it is handed.
pub trait Transport {
    /// Bytes of slot one batch may need.
    fn batch_bytes(&self) -> usize;

    /// Receives one batch into `slot` (at least [`Transport::batch_bytes`] long),
    /// appending one entry per datagram to `packets` (offsets into `slot`). With
    /// `wait`, blocks until datagrams arrive, the transport's idle limit passes or its
    /// waker fires; without, takes what is queued.
    fn receive(
        &mut self,
        slot: &mut [u8],
        packets: &mut Vec<PacketInfo>,
        wait: bool,
    ) -> io::Result<Received>;
}

/// What an [`InPlaceTransport`] dropped itself before a consumer saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Datagrams longer than the transport accepts.
    pub truncated: u64,
    /// Zero-length datagrams.
    pub empty: u64,
    /// Everything else it could not deliver: frames that were not a UDP datagram to a
    /// captured port, a datagram whose frames could not be joined, a descriptor that lied.
    pub other: u64,
}

/// A transport whose device writes into memory of its own (AF_XDP's UMEM, DPDK's
/// mbufs): it hands each batch to a consumer where it lies, then takes the memory back.
/// An engine fed this way copies each payload once, from the device's memory straight
/// into its heap or chunk (`Engine::feed` inside `consume`). `Send`: an element opens it on one thread
/// and receives on its streaming thread.
pub trait InPlaceTransport: Send {
    /// Receives one batch and calls `consume(data, packets)` with it (offsets into
    /// `data`); the memory goes back to the device when `consume` returns. With `wait`,
    /// blocks until datagrams arrive, `stop` is raised or the transport's waker fires
    /// ([`Received::Interrupted`]); without, takes what is queued ([`Received::Nothing`]
    /// when nothing is).
    fn receive_in_place(
        &mut self,
        stop: &std::sync::atomic::AtomicBool,
        wait: bool,
        consume: &mut dyn FnMut(&[u8], &[PacketInfo]),
    ) -> io::Result<Received>;

    /// What it dropped itself since it was opened.
    fn discarded(&self) -> Discarded;

    /// Datagrams the device or kernel dropped before the transport saw them (full
    /// rings, no free frame) since it was opened: may cost a system call, so read it when
    /// stats are due.
    fn device_drops(&mut self) -> u64;
}

/// What turns batches of datagrams into output (heaps, chunks), whichever transport
/// they came from.
pub trait Engine {
    /// What it makes.
    type Output;

    /// Takes the datagrams `packets` lists in `data` (entries outside `data` are
    /// counted as malformed and skipped, never read), appending what they finish to
    /// `out`. False once the engine has ended the stream (a stop heap, a handler's
    /// end): it drops what comes later.
    fn feed(&mut self, data: &[u8], packets: &[PacketInfo], out: &mut Vec<Self::Output>) -> bool;

    /// Ends everything still open (end of stream), appending it to `out`.
    fn finish(&mut self, out: &mut Vec<Self::Output>);
}

/// The datagram `p` of a batch in `data`, if it lies inside it: the bound every
/// [`Engine::feed`] checks before it reads (a transport's list is trusted no further
/// than its memory).
pub fn datagram<'a>(data: &'a [u8], p: &PacketInfo) -> Option<&'a [u8]> {
    let start = p.offset as usize;
    data.get(start..start.checked_add(p.len as usize)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_outside_the_batch_is_none() {
        let data = [1u8, 2, 3, 4];
        let p = |offset, len| PacketInfo {
            offset,
            len,
            ..Default::default()
        };
        assert_eq!(datagram(&data, &p(1, 2)), Some(&data[1..3]));
        assert_eq!(datagram(&data, &p(0, 4)), Some(&data[..]));
        assert_eq!(datagram(&data, &p(3, 2)), None);
        assert_eq!(datagram(&data, &p(u32::MAX, u32::MAX)), None);
        assert_eq!(datagram(&data, &p(4, 0)), Some(&data[4..4]));
    }
}
