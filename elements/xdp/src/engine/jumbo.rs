//! Datagrams longer than a UMEM frame (jumbo frames on an interface whose MTU exceeds
//! what one frame holds). With `XDP_USE_SG` the kernel copies such a datagram into
//! several frames, each descriptor but the last marked `XDP_PKT_CONTD`, and each frame's
//! bytes start `XDP_PACKET_HEADROOM` (256 B) into it. Downstream reads a datagram as
//! contiguous bytes, so the continuation frames' bytes are moved up against the first
//! frame's:
//! - in place, when the frames are the slots after the first (the usual case: the fill
//!   ring is posted in the order frames come back, which is slot order while buffers
//!   are released in order); the frames stay in the batch, lent with it;
//! - into the guard (frames past the UMEM's end that the kernel never sees), when the
//!   datagram's frames reached the last slot and went on elsewhere (the fill ring
//!   wrapped); those frames are held with the batch, which ends there.
//!
//! Any other layout (a frame out of slot order before the last slot, which happens only
//! when buffers were released out of order downstream) cannot be joined without a copy
//! elsewhere: the datagram is dropped and counted (`unjoined`). Nothing here allocates.

/// The longest frame the kernel can hand over: a 65535-byte IP datagram with an
/// Ethernet and a VLAN header.
const MAX_FRAME_BYTES: usize = 65535 + 18;

/// Bytes the kernel leaves before the data of each frame in copy mode
/// (`XDP_PACKET_HEADROOM`; the UMEM's own headroom is 0).
pub const FRAME_HEADROOM: usize = 256;

/// The UMEM's shape: `frames` slots of `frame_size` bytes, then the guard.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Slots the kernel receives into.
    pub frames: usize,
    /// Bytes per slot.
    pub frame_size: usize,
}

impl Geometry {
    /// The most frames one datagram spans (the kernel fills each after its headroom):
    /// 18 of 4096 bytes, 37 of 2048. A receive loop must look at least this many
    /// descriptors ahead to find the end of any datagram, and a chain of more is no
    /// datagram at all.
    pub fn max_frags(&self) -> usize {
        MAX_FRAME_BYTES.div_ceil(self.frame_size - FRAME_HEADROOM)
    }

    /// Frames after the UMEM reserved for datagrams that wrap: all of a datagram's
    /// frames but the first may lie past the end.
    pub fn guard_frames(&self) -> usize {
        self.max_frags() - 1
    }

    /// Bytes of the region: the slots and the guard after them.
    pub fn region_len(&self) -> usize {
        (self.frames + self.guard_frames()) * self.frame_size
    }

    /// The largest MTU whose frames (IP plus an Ethernet and a VLAN header) fit one
    /// slot of `frame_size` bytes after its headroom.
    pub fn max_mtu(frame_size: u32) -> usize {
        frame_size as usize - FRAME_HEADROOM - 18
    }

    /// Whether frames of an `mtu`-byte interface fit one slot; if not, the capture
    /// needs multi-buffer mode.
    pub fn holds_mtu(frame_size: u32, mtu: u32) -> bool {
        mtu as usize <= Self::max_mtu(frame_size)
    }
}

/// Where continuation frame `m` of a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The frame is the slot after the previous one: its bytes move back to `dst`
    /// inside the batch's run, and the frame is lent with the batch.
    InRun {
        /// Where its bytes go (an offset into the region).
        dst: usize,
    },
    /// The datagram wrapped: its bytes go to `dst` in the guard; the frame is held
    /// with the batch (released with it, in order) but lies outside the batch's run,
    /// which therefore ends with this datagram.
    Guard {
        /// Where its bytes go (an offset into the region, past the slots).
        dst: usize,
    },
}

/// Places continuation frame `m` (1 for the first after the datagram's first frame,
/// which is at slot `first`), received at slot `slot` with `len` bytes, whose bytes
/// must follow the datagram's bytes so far, which end at `end`. `None`: the frame is
/// not where joining in place or in the guard can use it (dropped, counted).
pub fn place(
    g: Geometry,
    first: usize,
    m: usize,
    slot: usize,
    len: usize,
    end: usize,
) -> Option<Placed> {
    let virtual_slot = first + m;
    let fits = |dst: usize| dst.checked_add(len).is_some_and(|e| e <= g.region_len());
    if virtual_slot < g.frames {
        (slot == virtual_slot && fits(end)).then_some(Placed::InRun { dst: end })
    } else {
        // Past the last slot: the datagram holds the last frame, so the guard is its
        // own; the frame may be any slot (the fill ring follows the order frames came
        // back, which skips frames still held downstream), since it goes back at once.
        fits(end).then_some(Placed::Guard { dst: end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FS: usize = 4096;
    const DATA: usize = FS - FRAME_HEADROOM;

    fn geo(frames: usize) -> Geometry {
        Geometry {
            frames,
            frame_size: FS,
        }
    }

    /// Lays `datagram` into `slots` as the kernel does (each frame's bytes after the
    /// headroom), joins it with [`place`] and returns the joined bytes, or `None`.
    fn join(g: Geometry, slots: &[usize], datagram: &[u8]) -> Option<Vec<u8>> {
        let mut region = vec![0xEEu8; g.region_len()];
        let frags: Vec<&[u8]> = datagram.chunks(g.frame_size - FRAME_HEADROOM).collect();
        assert_eq!(frags.len(), slots.len());
        let mut descs = vec![];
        for (&s, f) in slots.iter().zip(&frags) {
            let addr = s * g.frame_size + FRAME_HEADROOM;
            region[addr..addr + f.len()].copy_from_slice(f);
            descs.push((addr, f.len(), s));
        }
        let (start, len0, first) = descs[0];
        let mut end = start + len0;
        for (m, &(addr, len, slot)) in descs.iter().enumerate().skip(1) {
            let dst = match place(g, first, m, slot, len, end)? {
                Placed::InRun { dst } | Placed::Guard { dst } => dst,
            };
            region.copy_within(addr..addr + len, dst);
            end = dst + len;
        }
        Some(region[start..end].to_vec())
    }

    fn datagram(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn adjacent_frames_join_in_place() {
        let d = datagram(9014);
        assert_eq!(join(geo(64), &[10, 11, 12], &d).unwrap(), d);
        // A datagram that fills its frames exactly, and the largest one.
        let d = datagram(2 * DATA);
        assert_eq!(join(geo(64), &[62, 63], &d).unwrap(), d);
        let d = datagram(65535 + 14);
        let slots: Vec<usize> = (3..3 + 18).collect();
        assert_eq!(join(geo(64), &slots, &d).unwrap(), d);
    }

    #[test]
    fn a_datagram_that_wraps_joins_in_the_guard() {
        let d = datagram(9014);
        assert_eq!(join(geo(64), &[63, 0, 1], &d).unwrap(), d);
        assert_eq!(join(geo(64), &[62, 63, 0], &d).unwrap(), d);
        // The fill ring skipped frames held downstream: any slot after the last.
        assert_eq!(join(geo(64), &[63, 6, 7], &d).unwrap(), d);
        assert_eq!(join(geo(64), &[63, 9, 2], &d).unwrap(), d);
        // The largest datagram starting at the last slot: 17 frames in the guard.
        let d = datagram(65535 + 14);
        let slots: Vec<usize> = std::iter::once(63).chain(0..17).collect();
        assert_eq!(join(geo(64), &slots, &d).unwrap(), d);
    }

    #[test]
    fn the_guard_holds_the_largest_datagram_at_either_frame_size() {
        for (frame_size, frags) in [(4096, 18), (2048, 37)] {
            let g = Geometry {
                frames: 64,
                frame_size,
            };
            assert_eq!(g.max_frags(), frags, "{frame_size}");
            assert_eq!(g.region_len(), (64 + frags - 1) * frame_size);
            // The largest frame the kernel hands over, from the last slot on.
            let d = datagram(MAX_FRAME_BYTES);
            let slots: Vec<usize> = std::iter::once(63).chain(0..frags - 1).collect();
            assert_eq!(join(g, &slots, &d).unwrap(), d, "{frame_size}");
        }
    }

    #[test]
    fn frames_out_of_order_are_not_joined() {
        let d = datagram(9014);
        assert_eq!(join(geo(64), &[10, 12, 13], &d), None, "gap");
        assert_eq!(join(geo(64), &[10, 9, 11], &d), None, "backwards");
        assert_eq!(join(geo(64), &[30, 10, 11], &d), None, "a hole mid-UMEM");
    }

    #[test]
    fn mtu_decides_multi_buffer() {
        assert!(Geometry::holds_mtu(4096, 1500));
        assert!(Geometry::holds_mtu(2048, 1500));
        assert!(Geometry::holds_mtu(4096, 3500));
        assert!(!Geometry::holds_mtu(4096, 9000));
        assert!(!Geometry::holds_mtu(2048, 1900));
    }
}
