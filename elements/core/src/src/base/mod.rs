//! `PacketSrc` (GType `GstFhPacketSrc`): the base class of Firehose packet sources.
//!
//! A source is a *transport* — something that receives one batch of datagrams into pool
//! memory — wrapped as a `GstPushSrc`. Everything around the transport is the same for
//! every source and lives here, once, as in gst-plugins-rs' RTP base depayloader (a
//! subclass implements `handle_packet`, the base does the rest):
//!
//! - the properties `batch-size`, `memory`, `pool-size` (and the element's deprecated
//!   pool aliases), `readable-metas`, `output`, `caps`, `retrieve-sender-address`,
//!   `stats` and `stats-interval`, declared from the subclass's [`PacketSrcImpl`]
//!   constants so that each element keeps its own defaults, bounds and blurbs;
//! - the packet pool: sized from `pool-size` and the subclass's slot size, backed by
//!   `memory`, and re-cut from the memory an element downstream proposes in the
//!   allocation query (`fhshmsink`'s shared segments, `fhcudaupload`'s pinned pages);
//!   or, for a transport whose device writes into memory of its own (AF_XDP's UMEM,
//!   DPDK's mbufs, a registered RDMA region: [`ReceiveInto::Device`]), the one copy of each
//!   batch into the proposed memory, counted (`bytes-copied`);
//! - live control: `unlock` / `unlock_stop` end every wait at once, and an
//!   application's EOS keeps the batch `create` is returning ([`LiveControl`]);
//! - caps and negotiation: batches to elements that understand them, one buffer per
//!   datagram to stock elements ([`PacketOutput`]), and whether to attach the metas
//!   every language reads;
//! - `stats`: the subclass's counters plus the pool's, posted every `stats-interval`
//!   and at the end of the stream.
//!
//! A subclass implements [`PacketSrcImpl`]: `open` (check its settings, reset its
//! counters, return the slot size), `receive` (one batch into a slot of the pool it is
//! handed), `counters`, and optionally `close`. Its `BaseSrcImpl` and `PushSrcImpl`
//! are empty impls: their default methods chain up to the base.
//! docs/architecture.md ("Writing a new source") walks through `fhtestsrc`, the worked
//! example.
//!
//! Why the properties are installed on each subclass's class rather than on the base's:
//! a GObject property has one spec (default, bounds, blurb) per class that installs it,
//! and the sources differ in them (`pool-size` is 64 MiB on `fhudpsrc`, eight batches
//! on `fhtestsrc`; `batch-size` goes to 256 on one and 65536 on another). The base
//! installs them, from the subclass's constants, on the subclass's class, and routes
//! their set and get to itself ([`imp`]); the subclass never sees them.

use gst::glib;
use gst::glib::translate::*;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::subclass::prelude::*;

use std::sync::Arc;

use super::{LiveControl, PacketOutput, PoolProps, PoolSettings};
use crate::transport::InPlaceTransport;
use crate::wake::Waker;
use crate::SlotPool;

#[doc(hidden)]
pub mod imp;

glib::wrapper! {
    /// The abstract base class of Firehose packet sources (GType `GstFhPacketSrc`).
    pub struct PacketSrc(ObjectSubclass<imp::PacketSrc>)
        @extends gst_base::PushSrc, gst_base::BaseSrc, gst::Element, gst::Object;
}

/// The `batch-size` property of a source: its blurb, largest value and default.
#[derive(Clone, Copy, Debug)]
pub struct BatchSize {
    /// What one batch is for this transport ("Packets per buffer", "Most frames per
    /// rte_eth_rx_burst, pushed as one buffer").
    pub blurb: &'static str,
    /// The most the transport takes at once.
    pub max: u32,
    /// The default.
    pub default: u32,
}

impl BatchSize {
    /// The default `batch-size` of every packet source so far.
    pub const DEFAULT: u32 = 64;

    /// Up to `max` per batch, [`BatchSize::DEFAULT`] by default.
    pub const fn up_to(max: u32, blurb: &'static str) -> Self {
        Self {
            blurb,
            max,
            default: Self::DEFAULT,
        }
    }
}

/// What a subclass's [`PacketSrcImpl::receive`] returns: one batch buffer (the base
/// turns it into one buffer per datagram if that was negotiated), or the list itself
/// for a transport that builds it straight from its memory
/// ([`PacketOutput::list_from`], when [`Receive::list`]).
#[derive(Debug)]
pub enum Batch {
    /// A batch buffer ([`crate::batch::batch_buffer`]).
    Buffer(gst::Buffer),
    /// One buffer per datagram.
    List(gst::BufferList),
}

impl From<gst::Buffer> for Batch {
    fn from(b: gst::Buffer) -> Self {
        Batch::Buffer(b)
    }
}

/// Where a source receives its batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveInto {
    /// Into slots of a pool the base makes, sized from `pool-size` and
    /// [`PacketSrcImpl::slot_bytes`], and cut from the memory downstream proposes.
    Pool,
    /// Into memory the transport owns because its device writes there (it sizes it
    /// from the pool settings it is opened with, and reports its `pool-*` counters
    /// itself). When downstream proposes memory, the base copies each batch into it
    /// once, counted, and says why it cannot receive there.
    Device {
        /// Why, for that warning: "the NIC writes into its AF_XDP UMEM".
        why: &'static str,
    },
}

/// What the base hands a subclass's [`PacketSrcImpl::open`].
#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// `batch-size`.
    pub batch_size: u32,
    /// `memory`, `pool-size` (or a deprecated count), `readable-metas`: what a
    /// [`ReceiveInto::Device`] transport sizes its own memory from.
    pub pool: PoolSettings,
}

/// What the base hands a subclass's [`PacketSrcImpl::receive`] for one batch.
#[derive(Debug)]
pub struct Receive<'a> {
    /// The pool to take a slot from ([`ReceiveInto::Pool`]; `None` for a device's memory):
    /// the source's own, or one cut from the memory downstream proposed.
    pub pool: Option<&'a SlotPool>,
    /// Ends every wait at `unlock()`: pass [`LiveControl::flag`] to a pool wait and
    /// [`LiveControl::interrupt`] to a pacing sleep.
    pub live: &'a LiveControl,
    /// `batch-size` as it was at start.
    pub batch_size: u32,
    /// Whether to attach the metas every language reads (`readable-metas`, and
    /// someone downstream may read them).
    pub readable: bool,
    /// `output`, `caps` and what was negotiated.
    pub output: &'a PacketOutput,
    pub(crate) base: &'a imp::PacketSrc,
}

impl Receive<'_> {
    /// Whether negotiation chose one buffer per datagram.
    pub fn list(&self) -> bool {
        self.output.is_list()
    }

    /// Posts `stats` if `stats-interval` says one is due: for a receive loop that waits
    /// long without a batch (the base posts after each batch anyway).
    pub fn post_stats_if_due(&self) {
        self.base.post_stats_if_due();
    }

    /// The pool of a [`ReceiveInto::Pool`] source.
    pub fn pool(&self) -> Result<&SlotPool, gst::FlowError> {
        self.pool.ok_or(gst::FlowError::NotNegotiated)
    }
}

/// What a packet source implements; the base does the rest (module documentation).
pub trait PacketSrcImpl: PushSrcImpl + ObjectSubclass<Type: IsA<PacketSrc>> {
    /// False for a source that paces itself (replay, the test source): GstBaseSrc then
    /// does not treat it as live. True by default: a capture.
    const LIVE: bool = true;
    /// Its `batch-size` property.
    const BATCH_SIZE: BatchSize;
    /// Its pool properties (`memory`, `pool-size`, deprecated aliases).
    const POOL: &'static PoolProps;
    /// Where it receives: a pool of the base's (the default) or its device's memory.
    const RECEIVE_INTO: ReceiveInto = ReceiveInto::Pool;

    /// The keys its `stats` holds, in order, for the property's blurb: the `NAMES` of
    /// its [`counters!`](crate::counters) sets and any keys of its own
    /// (`&[Counters::NAMES, &["memory"]]`); the base adds the keys it appends itself
    /// (the pool's, or the copy into proposed memory's).
    const STATS: &'static [&'static [&'static str]];

    /// Bytes per pool slot with `batch_size` (for `pool-size` in bytes ↔ slots). By
    /// default the pool's `default_slot_bytes`: a source whose slots have one size.
    fn slot_bytes(&self, _batch_size: u32) -> u64 {
        Self::POOL.default_slot_bytes
    }

    /// At start, before the pool exists: checks the settings (an error names the
    /// property to change), opens the transport, resets the counters and the streaming
    /// state, and returns the slot size in bytes (a [`ReceiveInto::Device`] transport: its
    /// largest batch, the slot size of a copy into proposed memory). A transport that
    /// waits in `poll` installs its waker in the live control now
    /// ([`PacketSrcExt::live`]).
    fn open(&self, open: &Open) -> Result<usize, gst::ErrorMessage>;

    /// Receives one batch (into a slot of `rx.pool` for a [`ReceiveInto::Pool`] source) and
    /// returns it as a batch buffer
    /// ([`crate::batch::batch_buffer`]), time-stamped. `Err(Flushing)` when a wait was
    /// cut short by `unlock()`, `Err(Eos)` at the end of the stream (the base posts the
    /// final `stats`).
    fn receive(&self, rx: &Receive<'_>) -> Result<Batch, gst::FlowError>;

    /// The `firehose-stats` structure of its own counters; the base appends the pool's
    /// (or, for a [`ReceiveInto::Device`] source, what it copied into proposed memory).
    fn counters(&self) -> gst::Structure;

    /// On the streaming thread, just before the base posts `stats`: brings counters
    /// read from elsewhere (the kernel's drop count) up to date.
    fn refresh_counters(&self) {}

    /// At stop, after the streaming thread has left `receive`.
    fn close(&self) {}

    /// Opens the transport alone, GStreamer-free, for an engine that takes its batches
    /// where the device wrote them (a composed source: `fhspeadsrc
    /// transport="fhxdpsrc interface=…"`), with `waker` as the one that ends its waits;
    /// this element never starts. A [`ReceiveInto::Device`] transport can; the default
    /// says that this one cannot.
    fn open_in_place(
        &self,
        _open: &Open,
        _waker: Arc<Waker>,
    ) -> Result<Box<dyn InPlaceTransport>, gst::ErrorMessage> {
        let name = self.obj().type_().name();
        Err(gst::error_msg!(
            gst::CoreError::NotImplemented,
            (
                "{} cannot feed an engine in place: give transport= an AF_XDP source \
                 (fhxdpsrc …), or leave it unset for kernel UDP",
                name
            )
        ))
    }
}

/// Declares the packet source `$imp` (in an element's `imp` module, with
/// `firehose_core::src::prelude::*` in scope; the wrapper type is `super::$imp`, which
/// extends [`PacketSrc`]), GType `$type_name`: its GObject subclass of [`PacketSrc`],
/// its `ObjectImpl` with its own properties (the group in its field `$field`, whose
/// specs `$defaults` gives: [`own_properties!`](crate::own_properties); the base appends
/// its own after them), its `ElementImpl` with its metadata
/// ([`element_metadata!`](crate::element_metadata)), and its `BaseSrcImpl` and
/// `PushSrcImpl`, empty: their methods are the base's. What is left to write is its
/// [`PacketSrcImpl`].
///
/// ```text
/// firehose_core::packet_src! {
///     XdpSrc = "GstFhXdpSrc", own properties settings = Settings::default();
///     "Firehose AF_XDP source", "Source/Network", "Captures UDP to chosen ports …";
/// }
/// ```
#[macro_export]
macro_rules! packet_src {
    (
        $imp:ident = $type_name:literal, own properties $field:ident = $defaults:expr;
        $long_name:expr, $classification:expr, $description:expr $(;)?
    ) => {
        $crate::element_subclass!($imp, $type_name, $crate::src::PacketSrc);

        impl ObjectImpl for $imp {
            $crate::own_properties!($defaults, $field);
        }

        impl ElementImpl for $imp {
            $crate::element_metadata!($long_name, $classification, $description);
        }

        impl BaseSrcImpl for $imp {}
        impl PushSrcImpl for $imp {}
    };
}

/// The class struct of [`PacketSrc`]: the subclass's methods and constants, and the
/// property routing the base installs.
#[repr(C)]
pub struct Class {
    parent: gst_base::ffi::GstPushSrcClass,
    /// `None` in the abstract base's own class (GObject zero-fills it).
    pub(crate) methods: Option<Methods>,
    /// The first property id of the base's properties on this class; below it are
    /// the subclass's own, handled by `chain_set` / `chain_get`.
    first_base_id: u32,
    chain_set: Option<PropertyFn>,
    chain_get: Option<PropertyFn>,
}

/// The subclass's constants and methods, as the base calls them.
#[derive(Clone, Copy)]
pub(crate) struct Methods {
    pub(crate) live: bool,
    pub(crate) batch_size: BatchSize,
    pub(crate) pool: &'static PoolProps,
    pub(crate) receive_into: ReceiveInto,
    pub(crate) slot_bytes: fn(&PacketSrc, u32) -> u64,
    pub(crate) open: fn(&PacketSrc, &Open) -> Result<usize, gst::ErrorMessage>,
    pub(crate) receive: fn(&PacketSrc, &Receive<'_>) -> Result<Batch, gst::FlowError>,
    pub(crate) counters: fn(&PacketSrc) -> gst::Structure,
    pub(crate) refresh_counters: fn(&PacketSrc),
    pub(crate) close: fn(&PacketSrc),
    pub(crate) open_in_place: InPlaceFn,
}

type InPlaceFn =
    fn(&PacketSrc, &Open, Arc<Waker>) -> Result<Box<dyn InPlaceTransport>, gst::ErrorMessage>;

type PropertyFn = unsafe extern "C" fn(
    *mut glib::gobject_ffi::GObject,
    u32,
    *mut glib::gobject_ffi::GValue,
    *mut glib::gobject_ffi::GParamSpec,
);

// SAFETY: `Class` starts with the parent's class struct, as GObject requires.
unsafe impl ClassStruct for Class {
    type Type = imp::PacketSrc;
}

impl std::ops::Deref for Class {
    type Target = glib::Class<gst_base::PushSrc>;

    fn deref(&self) -> &Self::Target {
        // SAFETY: `parent` is the first field of a `#[repr(C)]` struct, and
        // `glib::Class<PushSrc>` is a transparent wrapper of `GstPushSrcClass`.
        unsafe { &*(&self.parent as *const _ as *const _) }
    }
}

/// Casts a class method's instance to the subclass `T`.
fn subclass<T: PacketSrcImpl>(obj: &PacketSrc) -> &T {
    obj.downcast_ref::<T::Type>()
        .expect("a PacketSrc method runs on an instance of its class")
        .imp()
}

// SAFETY: `class_init` fills every field of `Class` before any instance exists.
unsafe impl<T: PacketSrcImpl> IsSubclassable<T> for PacketSrc {
    fn class_init(class: &mut glib::Class<Self>) {
        Self::parent_class_init::<T>(class);
        let klass = class.as_mut();
        klass.methods = Some(Methods {
            live: T::LIVE,
            batch_size: T::BATCH_SIZE,
            pool: T::POOL,
            receive_into: T::RECEIVE_INTO,
            slot_bytes: |obj, batch| subclass::<T>(obj).slot_bytes(batch),
            open: |obj, open| subclass::<T>(obj).open(open),
            receive: |obj, rx| subclass::<T>(obj).receive(rx),
            counters: |obj| subclass::<T>(obj).counters(),
            refresh_counters: |obj| subclass::<T>(obj).refresh_counters(),
            close: |obj| subclass::<T>(obj).close(),
            open_in_place: |obj, open, waker| subclass::<T>(obj).open_in_place(open, waker),
        });

        // The keys the base appends to the subclass's counters (imp::PacketSrc::stats).
        let appended = match T::RECEIVE_INTO {
            ReceiveInto::Pool => "pool-*, memory",
            ReceiveInto::Device { .. } => "bytes-copied, bytes-uncopied, memory-copied-into",
        };
        let own: Vec<&str> = T::STATS
            .iter()
            .flat_map(|keys| keys.iter().copied())
            .collect();
        let stats = format!("{}, {appended}", own.join(", "));
        let specs = imp::PacketSrc::param_specs(T::BATCH_SIZE, T::POOL, &stats);
        // The subclass's own properties were installed with ids 1..=n by glib's
        // class_init (chained above); the base's follow.
        let first = <T as ObjectImpl>::properties().len() as u32 + 1;
        let gclass = klass as *mut Class as *mut glib::gobject_ffi::GObjectClass;
        // SAFETY: `gclass` is this class, being initialised: GObject allows installing
        // properties and setting its property methods now. Each spec is a valid
        // GParamSpec that GLib takes its own reference to.
        unsafe {
            klass.first_base_id = first;
            klass.chain_set = (*gclass).set_property;
            klass.chain_get = (*gclass).get_property;
            (*gclass).set_property = Some(set_property::<T>);
            (*gclass).get_property = Some(get_property::<T>);
            // `create` is the base's, reached straight from GstBaseSrc through
            // GstPushSrc's C function: chaining up through glib's trampolines for T
            // loses a buffer list the base returns (gstreamer-base 0.25 keeps the
            // pending list per Rust type, so T's level never sees the one the base's
            // level stored, and reports "No buffer and no buffer list returned"). The
            // base submits a list itself (`imp`), and a subclass has nothing to add to
            // `create`: its hook is `receive`.
            let push_src =
                glib::gobject_ffi::g_type_class_peek(gst_base::PushSrc::static_type().into_glib())
                    as *const gst_base::ffi::GstBaseSrcClass;
            let base = glib::gobject_ffi::g_type_class_peek(PacketSrc::static_type().into_glib())
                as *const gst_base::ffi::GstPushSrcClass;
            (*(gclass as *mut gst_base::ffi::GstBaseSrcClass)).create = (*push_src).create;
            (*(gclass as *mut gst_base::ffi::GstPushSrcClass)).create = (*base).create;
            for (i, spec) in specs.iter().enumerate() {
                glib::gobject_ffi::g_object_class_install_property(
                    gclass,
                    first + i as u32,
                    spec.to_glib_none().0,
                );
            }
        }
    }
}

/// The class struct of `T`'s type.
fn class_of<T: PacketSrcImpl>() -> &'static Class {
    // SAFETY: `T::Type` is a PacketSrc subclass whose class exists once its first
    // instance does (a property call has one), and classes of static types live for
    // ever.
    unsafe {
        &*(glib::gobject_ffi::g_type_class_peek(T::Type::static_type().into_glib()) as *const Class)
    }
}

/// `GObjectClass::set_property` of a PacketSrc subclass: the base's properties to the
/// base, the subclass's own to glib's trampoline for it.
unsafe extern "C" fn set_property<T: PacketSrcImpl>(
    obj: *mut glib::gobject_ffi::GObject,
    id: u32,
    value: *mut glib::gobject_ffi::GValue,
    pspec: *mut glib::gobject_ffi::GParamSpec,
) {
    let class = class_of::<T>();
    if id < class.first_base_id {
        let chain = class.chain_set.expect("glib installs set_property");
        // SAFETY: the arguments GObject gave us, for the method they were meant for.
        unsafe { chain(obj, id, value, pspec) };
        return;
    }
    // SAFETY: GObject calls this for an instance of T (a PacketSrc) with a value of
    // the spec's type; `glib::Value` is a transparent wrapper of `GValue`.
    let (obj, value, pspec) = unsafe {
        (
            glib::Object::from_glib_borrow(obj),
            &*(value as *const glib::Value),
            glib::ParamSpec::from_glib_borrow(pspec),
        )
    };
    let src = obj.downcast_ref::<PacketSrc>().expect("a PacketSrc");
    src.imp()
        .set_base_property((id - class.first_base_id) as usize, value, &pspec);
}

/// `GObjectClass::get_property` of a PacketSrc subclass, as [`set_property`].
unsafe extern "C" fn get_property<T: PacketSrcImpl>(
    obj: *mut glib::gobject_ffi::GObject,
    id: u32,
    value: *mut glib::gobject_ffi::GValue,
    pspec: *mut glib::gobject_ffi::GParamSpec,
) {
    let class = class_of::<T>();
    if id < class.first_base_id {
        let chain = class.chain_get.expect("glib installs get_property");
        // SAFETY: as in `set_property`.
        unsafe { chain(obj, id, value, pspec) };
        return;
    }
    // SAFETY: as in `set_property`; `value` is initialised to the spec's type, which
    // the base's value has too.
    unsafe {
        let obj = glib::Object::from_glib_borrow(obj);
        let pspec = glib::ParamSpec::from_glib_borrow(pspec);
        let src = obj.downcast_ref::<PacketSrc>().expect("a PacketSrc");
        let v = src
            .imp()
            .base_property((id - class.first_base_id) as usize, &pspec);
        glib::gobject_ffi::g_value_copy(v.to_glib_none().0, value);
    }
}

/// What a subclass may ask of its base.
pub trait PacketSrcExt: IsA<PacketSrc> + 'static {
    /// The live control (for a subclass that waits outside `receive`).
    fn live(&self) -> &LiveControl {
        self.upcast_ref::<PacketSrc>().imp().live()
    }

    /// `memory`, `pool-size` and `readable-metas` as set now (a device transport's
    /// `stats` derive its slot count from them before it starts).
    fn pool_settings(&self) -> PoolSettings {
        self.upcast_ref::<PacketSrc>().imp().pool_settings()
    }

    /// Opens this source's transport alone, with its properties as set now, for an
    /// engine that takes batches in place ([`PacketSrcImpl::open_in_place`]).
    fn open_in_place(
        &self,
        waker: Arc<Waker>,
    ) -> Result<Box<dyn InPlaceTransport>, gst::ErrorMessage> {
        self.upcast_ref::<PacketSrc>().imp().open_in_place(waker)
    }
}

impl<O: IsA<PacketSrc>> PacketSrcExt for O {}
