//! The packet-batch meta: where each datagram of a batch buffer sits, who sent it and
//! when it arrived.
//!
//! A batch buffer holds many datagrams in one pool slot (one `recvmmsg`, one push). The
//! meta lists, per datagram, its byte offset and length inside the buffer, its source
//! address and its kernel receive time. [`PacketInfo`] and [`PacketAddr`] are plain
//! data; [`PacketBatchMeta`] attaches a list of them to a `gst::Buffer`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ptr;

use gst::glib;
use gst::glib::translate::{from_glib, IntoGlib};
use gst::prelude::*;

/// A compact, `Copy` socket address (IPv4 stored as IPv4-mapped IPv6).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PacketAddr {
    ip: [u8; 16],
    port: u16,
    v4: bool,
}

impl PacketAddr {
    /// The address as a std socket address.
    pub fn to_socket_addr(&self) -> SocketAddr {
        let v6 = Ipv6Addr::from(self.ip);
        let ip = if self.v4 {
            IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED))
        } else {
            IpAddr::V6(v6)
        };
        SocketAddr::new(ip, self.port)
    }
}

impl From<SocketAddr> for PacketAddr {
    fn from(a: SocketAddr) -> Self {
        match a.ip() {
            IpAddr::V4(v4) => Self {
                ip: v4.to_ipv6_mapped().octets(),
                port: a.port(),
                v4: true,
            },
            IpAddr::V6(v6) => Self {
                ip: v6.octets(),
                port: a.port(),
                v4: false,
            },
        }
    }
}

impl fmt::Debug for PacketAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_socket_addr())
    }
}

/// One datagram inside a batch buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketInfo {
    /// Byte offset of the datagram's payload in the buffer.
    pub offset: u32,
    /// Payload length in bytes.
    pub len: u32,
    /// Kernel receive time, nanoseconds since the Unix epoch (0 if unknown).
    pub rx_time_ns: u64,
    /// Who sent it.
    pub src: PacketAddr,
}

impl PacketInfo {
    /// The byte range of the payload in the buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset as usize..self.offset as usize + self.len as usize
    }
}

/// The meta attached to `application/x-firehose-packets` buffers.
#[repr(C)]
pub struct PacketBatchMeta {
    parent: gst::ffi::GstMeta,
    packets: Vec<PacketInfo>,
}

// SAFETY: the meta owns plain data (a Vec of Copy values).
unsafe impl Send for PacketBatchMeta {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for PacketBatchMeta {}

impl PacketBatchMeta {
    /// Attaches `packets` to `buffer`. Each entry's range must lie inside the buffer.
    pub fn add(
        buffer: &mut gst::BufferRef,
        packets: Vec<PacketInfo>,
    ) -> gst::MetaRefMut<'_, Self, gst::meta::Standalone> {
        let mut params = std::mem::ManuallyDrop::new(packets);
        // SAFETY: the init function takes ownership of the Vec behind `params` (moved out
        // with ptr::read), so it is neither leaked nor dropped twice.
        unsafe {
            let meta = gst::ffi::gst_buffer_add_meta(
                buffer.as_mut_ptr(),
                imp::meta_info(),
                &mut *params as *mut Vec<PacketInfo> as glib::ffi::gpointer,
            ) as *mut imp::RawMeta;
            Self::from_mut_ptr(buffer, meta)
        }
    }

    /// The datagrams of the batch, in arrival order.
    pub fn packets(&self) -> &[PacketInfo] {
        &self.packets
    }
}

// SAFETY: PacketBatchMeta is repr(C) with a GstMeta first, and meta_api() is the API
// type registered for it.
unsafe impl MetaAPI for PacketBatchMeta {
    type GstType = imp::RawMeta;

    fn meta_api() -> glib::Type {
        imp::meta_api_get_type()
    }
}

impl fmt::Debug for PacketBatchMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBatchMeta")
            .field("packets", &self.packets.len())
            .finish()
    }
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

mod imp {
    use super::*;
    use std::sync::LazyLock;

    pub type RawMeta = super::PacketBatchMeta;

    pub(super) fn meta_api_get_type() -> glib::Type {
        static TYPE: LazyLock<glib::Type> = LazyLock::new(|| {
            // SAFETY: registering a meta API with a NUL-terminated name and an empty,
            // NULL-terminated tag list, once.
            unsafe {
                let mut tags: [*const std::os::raw::c_char; 1] = [ptr::null()];
                let t = from_glib(gst::ffi::gst_meta_api_type_register(
                    c"FirehosePacketBatchMetaAPI".as_ptr(),
                    tags.as_mut_ptr(),
                ));
                assert_ne!(t, glib::Type::INVALID);
                t
            }
        });
        *TYPE
    }

    unsafe extern "C" fn init(
        meta: *mut gst::ffi::GstMeta,
        params: glib::ffi::gpointer,
        _buffer: *mut gst::ffi::GstBuffer,
    ) -> glib::ffi::gboolean {
        // SAFETY: GStreamer gives us uninitialised storage of size_of::<RawMeta>(); params
        // is the ManuallyDrop<Vec> from PacketBatchMeta::add (or a clone in transform).
        unsafe {
            let meta = &mut *(meta as *mut RawMeta);
            let packets = if params.is_null() {
                Vec::new()
            } else {
                ptr::read(params as *const Vec<PacketInfo>)
            };
            ptr::write(&mut meta.packets, packets);
        }
        true.into_glib()
    }

    unsafe extern "C" fn free(meta: *mut gst::ffi::GstMeta, _buffer: *mut gst::ffi::GstBuffer) {
        // SAFETY: init wrote a valid Vec; free runs once.
        unsafe {
            let meta = &mut *(meta as *mut RawMeta);
            ptr::drop_in_place(&mut meta.packets);
        }
    }

    unsafe extern "C" fn transform(
        dest: *mut gst::ffi::GstBuffer,
        meta: *mut gst::ffi::GstMeta,
        _buffer: *mut gst::ffi::GstBuffer,
        type_: glib::ffi::GQuark,
        data: glib::ffi::gpointer,
    ) -> glib::ffi::gboolean {
        // SAFETY: called by GStreamer with a valid source meta; for the copy transform
        // `data` is a GstMetaTransformCopy. Offsets are rebased for region copies and
        // datagrams not wholly inside the region are left out.
        unsafe {
            if from_glib::<_, glib::Quark>(type_) != glib::Quark::from_str("gst-copy") {
                return false.into_glib();
            }
            let src = &*(meta as *const RawMeta);
            let copy = &*(data as *const gst::ffi::GstMetaTransformCopy);
            let packets: Vec<PacketInfo> = if copy.region == glib::ffi::GFALSE {
                src.packets.clone()
            } else {
                let (start, size) = (copy.offset, copy.size);
                src.packets
                    .iter()
                    .filter(|p| p.offset as usize >= start && p.range().end <= start + size)
                    .map(|p| PacketInfo {
                        offset: (p.offset as usize - start) as u32,
                        ..*p
                    })
                    .collect()
            };
            let mut params = std::mem::ManuallyDrop::new(packets);
            let m = gst::ffi::gst_buffer_add_meta(
                dest,
                meta_info(),
                &mut *params as *mut Vec<PacketInfo> as glib::ffi::gpointer,
            );
            (!m.is_null()).into_glib()
        }
    }

    pub(super) fn meta_info() -> *const gst::ffi::GstMetaInfo {
        struct MetaInfo(ptr::NonNull<gst::ffi::GstMetaInfo>);
        // SAFETY: GstMetaInfo is immutable after registration.
        unsafe impl Send for MetaInfo {}
        // SAFETY: as above.
        unsafe impl Sync for MetaInfo {}

        static INFO: LazyLock<MetaInfo> = LazyLock::new(|| {
            // SAFETY: registers the implementation for our API type once, with functions
            // matching the RawMeta layout.
            unsafe {
                MetaInfo(
                    ptr::NonNull::new(gst::ffi::gst_meta_register(
                        meta_api_get_type().into_glib(),
                        c"FirehosePacketBatchMeta".as_ptr(),
                        std::mem::size_of::<RawMeta>(),
                        Some(init),
                        Some(free),
                        Some(transform),
                    ) as *mut gst::ffi::GstMetaInfo)
                    .expect("gst_meta_register failed"),
                )
            }
        });
        INFO.0.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(offset: u32, len: u32) -> PacketInfo {
        PacketInfo {
            offset,
            len,
            rx_time_ns: 7,
            src: "127.0.0.1:5000".parse::<SocketAddr>().unwrap().into(),
        }
    }

    #[test]
    fn addr_round_trip() {
        for s in ["10.1.2.3:9", "[::1]:7148", "[fe80::1]:1"] {
            let a: SocketAddr = s.parse().unwrap();
            assert_eq!(PacketAddr::from(a).to_socket_addr(), a);
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
