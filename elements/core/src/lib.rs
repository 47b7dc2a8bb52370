//! Firehose core: the vocabulary every Firehose element shares.
//!
//! This crate has no element of its own. It provides
//! - [`memory`]: page-aligned memory regions (system pages or hugepages), pre-faulted;
//! - [`provider`]: memory kinds — who makes the regions pools are cut from (anonymous,
//!   shared segments, memory registered with a device driver);
//! - [`alloc`]: how an element downstream hands its memory kind to a source through
//!   the standard allocation query;
//! - [`pool`]: fixed-slot pools whose RAII slots return themselves on drop;
//! - [`gstmem`]: wrapping a pool slot as a `gst::Memory` without a copy, and telling
//!   which kind of memory a buffer holds;
//! - [`batch`]: the packet-batch meta that describes the datagrams inside one buffer;
//! - [`stats`]: the shared statistics counters, their names and their `gst::Structure`;
//! - [`pace`]: drift-free rate pacing, the nominal time of each byte of a paced stream,
//!   and the interruptible sleep an element's `unlock()` cuts short;
//! - [`caps`]: caps names;
//! - [`element`]: the GObject/GStreamer skeleton every element repeats (debug category,
//!   metadata, pad templates, posting `stats`), as macros and a trait;
//! - [`split`]: datagram splitters by name (replay cuts GSO-captured records with the
//!   one a protocol crate registered);
//! - [`src`]: the live-source layer (unlock, counters, pool properties);
//! - [`frame`]: decoding the UDP datagram in an Ethernet / cooked / raw-IP frame;
//! - [`netif`]: network interface indexes by name;
//! - [`meta`]: the buffer metas: `rust_meta!` for Rust-only ones, the chunk meta, and
//!   the message meta every language reads;
//! - [`ring`], [`arena`], [`wake`]: device receive rings, slot arenas, wake-up
//!   coalescing;
//! - [`thread`]: pinning a receive thread to a CPU, at a real-time priority if asked;
//! - [`transport`]: the seam between transports (what receives batches) and engines
//!   (what makes heaps or chunks of them), which composes any engine with any
//!   transport, or with several.
//!
//! The chunk engine, packet handlers and the landing protocol are in `firehose-chunk`.
//!
//! [`memory`], [`pool`], [`pace`] and the plain parts of [`batch`] and [`stats`] use no
//! GStreamer types, so engines built on them can be tested and benchmarked alone.

pub mod alloc;
pub mod arena;
pub mod batch;
pub mod caps;
pub mod element;
pub mod endpoint;
pub mod enums;
pub mod frame;
pub mod gstmem;
pub mod memory;
pub mod meta;
pub mod multicast;
pub mod netif;
pub mod pace;
pub mod packet;
pub mod pool;
pub mod property;
pub mod props;
pub mod provider;
pub mod ring;
pub mod split;
pub mod src;
pub mod stats;
pub mod sync;
pub mod testing;
pub mod thread;
pub mod transport;
pub mod wake;

#[doc(hidden)]
pub use gst as __gst;
#[doc(hidden)]
pub use gst::glib as __glib;
#[doc(hidden)]
pub use gst_base as __gst_base;

pub use arena::SlotArena;
pub use batch::{PacketAddr, PacketBatchMeta, PacketInfo};
pub use memory::{HugepagePolicy, MemoryKind, MemoryRegion, RegionError};
pub use pool::{PoolConfig, PoolStats, Slot, SlotPool};
pub use provider::MemoryProvider;
