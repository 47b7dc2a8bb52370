//! What a packet source pushes: packet batches to elements that understand them, plain
//! datagrams to everything else.
//!
//! The rule (`output=auto`, the default), applied at negotiation:
//! 1. The source asks downstream with a custom query, [`PACKETS_QUERY`]. Every Firehose
//!    consumer of packets (`speaddepay`, `fhdepay`, `fhrecordsink`, `fhudpsink`,
//!    `fhshmsink`, `fhcudaupload`, `fhcheck`, `fhdpdksink`) answers it;
//!    `queue`, `tee`, `capsfilter` and other elements pass it on; stock sinks
//!    (`filesink`, `appsink`, `fakesink`) do not answer. Answered: batches.
//! 2. Otherwise the source asks for the caps downstream accepts, with no filter. An
//!    answer that is not ANY, accepts `application/x-firehose-packets` and not the
//!    datagrams' caps (`appsink caps=application/x-firehose-packets`, a `capsfilter`
//!    with those caps): batches.
//! 3. Anything else (ANY: `filesink`, `appsink` without caps, `fakesink`): a buffer
//!    list of one buffer per datagram, each a sub-memory of the batch slot (no copy),
//!    with the `caps` property's caps or `application/octet-stream`.
//!
//! `output=batch` or `output=list` decides without asking.
//!
//! A buffer pushed per datagram carries a `GstNetAddressMeta` with its sender, as
//! stock `udpsrc`'s buffers do (`retrieve-sender-address`, default true), from the
//! source address in the batch's [`PacketInfo`]; a source that does not know the
//! sender (port 0 and the unspecified address, as `fhtestsrc`'s) adds none. The
//! `GSocketAddress` of a sender is made once and shared (a reference per buffer) by
//! every datagram from it: a [`SenderCache`] of up to [`SENDER_CACHE`] senders lives
//! in the source, across batches. Batches keep their own metas and get none.
//!
//! Why a query and not the consumers' caps: a consumer that records or forwards any
//! buffer (`fhrecordsink` after a stock `udpsrc caps=application/x-rtp`, `fhudpsink`
//! after an RTP payloader) must keep ANY caps, or linking such a stock element to it
//! fails (the link check intersects both pads' unfiltered caps); and an ANY answer
//! cannot tell a Firehose consumer from `filesink`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gst::glib;
use gst::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;
use gst_net::gio;

use crate::batch::{PacketAddr, PacketBatchMeta, PacketInfo};
use crate::caps::{self as fcaps, packets_caps};
use crate::props::Output;
use crate::sync::lock;

/// The caps of a datagram pushed as plain bytes when the `caps` property is unset.
pub const DATAGRAM: &str = "application/octet-stream";

/// The caps of plain datagrams when the user gave none.
pub fn datagram_caps() -> gst::Caps {
    gst::Caps::new_empty_simple(DATAGRAM)
}

/// The `src` pad template of a packet source: packet batches, or plain datagrams
/// (`application/octet-stream`; the `caps` property may name other caps for them, as
/// `udpsrc`'s does).
pub fn packets_src_template() -> gst::PadTemplate {
    let mut caps = packets_caps();
    caps.merge(datagram_caps());
    super::src_template(&caps)
}

/// The name of the custom query (a `gst::query::Custom` whose structure has this
/// name) that a Firehose consumer answers by setting `understood=true` in it: it reads
/// `application/x-firehose-packets` batches.
pub const PACKETS_QUERY: &str = "firehose-packets-understood";

/// Whether the element downstream of `pad` understands packet batches (rules 1 and 2
/// in the module documentation).
pub fn peer_understands_packets(pad: &gst::Pad, datagrams: &gst::Caps) -> bool {
    let mut q = gst::query::Custom::new(gst::Structure::new_empty(PACKETS_QUERY));
    if pad.peer_query(&mut q)
        && q.structure()
            .is_some_and(|s| s.get::<bool>("understood").unwrap_or(false))
    {
        return true;
    }
    let peer = pad.peer_query_caps(None);
    !peer.is_any() && peer.can_intersect(&packets_caps()) && !peer.can_intersect(datagrams)
}

/// Answers [`PACKETS_QUERY`] (true: it was that query, now answered); false for any
/// other query. A Firehose consumer of packet batches calls it first in its sink pad's
/// query handler (`BaseSinkImpl::query`, a pad query function).
pub fn answer_packets_query(query: &mut gst::QueryRef) -> bool {
    let gst::QueryViewMut::Custom(q) = query.view_mut() else {
        return false;
    };
    match q.structure_mut() {
        s if s.name() == PACKETS_QUERY => {
            s.set("understood", true);
            true
        }
        _ => false,
    }
}

/// The query handler of a Firehose consumer's sink pad, around `parent` (its default
/// handling): answers [`PACKETS_QUERY`]; to an ALLOCATION query it adds, after
/// `parent`'s answer, that it reads only the Rust metas
/// ([`crate::meta::readable::declare_rust_only`], so the element upstream can leave the
/// readable ones out), and counts it answered; any other query goes to `parent`.
pub fn consumer_query(
    query: &mut gst::QueryRef,
    parent: impl FnOnce(&mut gst::QueryRef) -> bool,
) -> bool {
    if answer_packets_query(query) {
        return true;
    }
    if !matches!(query.view(), gst::QueryView::Allocation(_)) {
        return parent(query);
    }
    // Whatever the default answer (a pool, memory, or nothing), the declaration holds;
    // answered, so that a `tee` keeps it when every branch declares it.
    let _ = parent(query);
    if let gst::QueryViewMut::Allocation(q) = query.view_mut() {
        crate::meta::readable::declare_rust_only(q);
    }
    true
}

/// The Firehose formats and plain bytes: packet batches, SPEAD heaps, chunks and
/// `application/octet-stream` (what `fhcudaupload` passes on).
pub fn firehose_caps() -> gst::Caps {
    [fcaps::PACKETS, fcaps::SPEAD_HEAP, fcaps::CHUNK, DATAGRAM]
        .into_iter()
        .map(gst::Caps::new_empty_simple)
        .collect()
}

/// How many senders a [`SenderCache`] remembers; a source that sees more starts over.
pub const SENDER_CACHE: usize = 1024;

/// The `GSocketAddress`es of the senders seen (up to [`SENDER_CACHE`]), so that the
/// `GstNetAddressMeta` of a datagram from a known sender takes a reference to an
/// existing address instead of a new `GInetSocketAddress` (two GObjects, ~1 µs). A
/// stream from one sender makes one address, ever. The last sender found is checked
/// first; the others are looked up in a map with a cheap hash.
#[derive(Debug, Default)]
pub struct SenderCache {
    map: HashMap<PacketAddr, gio::SocketAddress, BuildHasherDefault<AddrHasher>>,
    /// The last sender found.
    last: Option<(PacketAddr, gio::SocketAddress)>,
    /// Addresses made (senders not found), for tests.
    made: u64,
}

impl SenderCache {
    /// The address of sender `a`, made on first sight; `None` when the source does
    /// not know the sender (port 0 and the unspecified address).
    pub fn get(&mut self, a: &PacketAddr) -> Option<&gio::SocketAddress> {
        if a.is_unknown() {
            return None;
        }
        if !self.last.as_ref().is_some_and(|(k, _)| k == a) {
            let addr = match self.map.get(a) {
                Some(addr) => addr.clone(),
                None => {
                    if self.map.len() >= SENDER_CACHE {
                        self.map.clear();
                    }
                    let addr: gio::SocketAddress =
                        gio::InetSocketAddress::from(a.to_socket_addr()).upcast();
                    self.map.insert(*a, addr.clone());
                    self.made += 1;
                    addr
                }
            };
            self.last = Some((*a, addr));
        }
        self.last.as_ref().map(|(_, s)| s)
    }

    /// How many addresses it made (senders not found in it).
    pub fn made(&self) -> u64 {
        self.made
    }

    /// Adds to `buf` a `GstNetAddressMeta` with sender `a`, if known.
    fn attach(&mut self, buf: &mut gst::BufferRef, a: &PacketAddr) {
        if let Some(addr) = self.get(a) {
            gst_net::NetAddressMeta::add(buf, addr);
        }
    }
}

/// A cheap hash of a sender (FxHash's mixing): the map's keys come from the network,
/// but a sender can only slow down its own lookups by colliding.
#[derive(Debug, Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_ne_bytes(w))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The `output`, `caps` and `retrieve-sender-address` properties of a packet source,
/// declared once; the element hands them to its [`PacketOutput`] when one is set
/// ([`PacketOutput::apply`]).
#[derive(Clone, Debug)]
pub struct OutputSettings {
    /// `output`.
    pub output: Output,
    /// `caps`: of the datagrams pushed one per buffer.
    pub caps: Option<gst::Caps>,
    /// `retrieve-sender-address`.
    pub retrieve_sender_address: bool,
}

impl Default for OutputSettings {
    fn default() -> Self {
        Self {
            output: Output::default(),
            caps: None,
            retrieve_sender_address: true,
        }
    }
}

crate::property_group! {
    OutputSettings as _s {
        output => glib::ParamSpecEnum::builder::<Output>("output")
            .nick("Output")
            .blurb(
                "batch: one buffer per batch (application/x-firehose-packets); list: one \
                 buffer per datagram in a buffer list (for stock elements); auto: batch \
                 when downstream understands packet batches, list otherwise",
            )
            .mutable_ready()
            .build();
        caps => glib::ParamSpecBoxed::builder::<gst::Caps>("caps")
            .nick("Caps")
            .blurb(
                "Caps of the datagrams when they go out one per buffer (e.g. \
                 application/x-rtp,…; unset: application/octet-stream)",
            )
            .mutable_ready()
            .build();
        retrieve_sender_address => glib::ParamSpecBoolean::builder("retrieve-sender-address")
            .nick("Retrieve sender address")
            .blurb(
                "When datagrams go out one per buffer, add a GstNetAddressMeta with \
                 the sender to each (as udpsrc does); batches carry senders in their \
                 own metas either way",
            )
            .default_value(true)
            .mutable_playing()
            .build();
    }
}

/// The `output`, `caps` and `retrieve-sender-address` properties of a packet source,
/// what it negotiated, and the senders of its datagrams.
#[derive(Debug)]
pub struct PacketOutput {
    /// As last applied (`retrieve_sender_address` is read from `senders_on`).
    settings: Mutex<OutputSettings>,
    /// Negotiated: one buffer per datagram in a list (else one batch buffer).
    list: AtomicBool,
    /// `retrieve-sender-address`: a `GstNetAddressMeta` on each datagram's buffer.
    senders_on: AtomicBool,
    /// The senders' addresses, across batches (locked once per batch, by the
    /// streaming thread only).
    senders: Mutex<SenderCache>,
}

impl Default for PacketOutput {
    fn default() -> Self {
        Self {
            settings: Mutex::default(),
            list: AtomicBool::new(false),
            senders_on: AtomicBool::new(true),
            senders: Mutex::default(),
        }
    }
}

impl PacketOutput {
    /// Takes the settings as set now (the element calls it whenever one changes;
    /// `retrieve-sender-address` may change while playing).
    pub fn apply(&self, s: &OutputSettings) {
        self.senders_on
            .store(s.retrieve_sender_address, Ordering::Relaxed);
        *lock(&self.settings) = s.clone();
    }

    /// The caps of datagrams pushed one per buffer.
    fn datagram_caps(&self) -> gst::Caps {
        lock(&self.settings)
            .caps
            .clone()
            .unwrap_or_else(datagram_caps)
    }

    /// `BaseSrcImpl::caps`: what the source can produce with its `output` setting
    /// (batches first), intersected with `filter`.
    pub fn caps(&self, filter: Option<&gst::Caps>) -> Option<gst::Caps> {
        let output = lock(&self.settings).output;
        let caps = match output {
            Output::Batch => packets_caps(),
            Output::List => self.datagram_caps(),
            Output::Auto => {
                let mut c = packets_caps();
                c.merge(self.datagram_caps());
                c
            }
        };
        super::caps_query(caps, filter)
    }

    /// `BaseSrcImpl::negotiate`: chooses batches or datagrams (the rule in the module
    /// documentation) and sets the caps. A downstream that refuses them is an error
    /// that says what to set.
    pub fn negotiate(&self, src: &gst_base::BaseSrc) -> Result<(), gst::LoggableError> {
        let output = lock(&self.settings).output;
        let pad = src.static_pad("src").expect("a source has a src pad");
        let batch = match output {
            Output::Batch => true,
            Output::List => false,
            Output::Auto => peer_understands_packets(&pad, &self.datagram_caps()),
        };
        let caps = if batch {
            packets_caps()
        } else {
            let mut c = self.datagram_caps();
            c.fixate();
            c
        };
        self.list.store(!batch, Ordering::Release);
        gst::debug!(
            gst::CAT_DEFAULT,
            obj = src,
            "output={output:?}: {} with caps {caps}",
            if batch {
                "batches"
            } else {
                "one datagram per buffer"
            }
        );
        // A refused caps event would still be stored as sticky (set_caps succeeds);
        // ask first, so that the error says what to set.
        if pad.peer_query_accept_caps(&caps) && src.set_caps(&caps).is_ok() {
            return Ok(());
        }
        let fix = if batch {
            "set output=list (and caps= the datagrams' caps) for an element that reads \
             plain datagrams"
        } else {
            "set caps= to caps that it accepts, or output=batch for an element that reads \
             application/x-firehose-packets"
        };
        gst::element_error!(
            src,
            gst::CoreError::Negotiation,
            ("Downstream does not accept {}: {}", caps, fix)
        );
        Err(gst::loggable_error!(
            gst::CAT_DEFAULT,
            "downstream refused {}",
            caps
        ))
    }

    /// Whether negotiation chose one buffer per datagram.
    pub fn is_list(&self) -> bool {
        self.list.load(Ordering::Acquire)
    }

    /// What `create` returns for the batch buffer `buf`: it, or a list of one buffer
    /// per datagram if negotiation chose that.
    pub fn push(&self, buf: gst::Buffer) -> CreateSuccess {
        if self.is_list() {
            let mut senders = self.senders();
            CreateSuccess::NewBufferList(datagram_list(&buf, senders.as_deref_mut()))
        } else {
            CreateSuccess::NewBuffer(buf)
        }
    }

    /// [`datagram_list_from`] with this source's senders (if `retrieve-sender-address`).
    pub fn list_from(
        &self,
        memory: &gst::MemoryRef,
        packets: &[PacketInfo],
        pts: Option<gst::ClockTime>,
    ) -> gst::BufferList {
        let mut senders = self.senders();
        datagram_list_from(memory, packets, pts, senders.as_deref_mut())
    }

    /// The sender cache, if `retrieve-sender-address`.
    fn senders(&self) -> Option<std::sync::MutexGuard<'_, SenderCache>> {
        self.senders_on
            .load(Ordering::Relaxed)
            .then(|| lock(&self.senders))
    }
}

/// A buffer list of one buffer per datagram of `packets` in `memory`, each a
/// sub-memory (no copy), stamped `pts`; with `senders`, each with a
/// `GstNetAddressMeta` naming its sender (when known).
pub fn datagram_list_from(
    memory: &gst::MemoryRef,
    packets: &[PacketInfo],
    pts: Option<gst::ClockTime>,
    mut senders: Option<&mut SenderCache>,
) -> gst::BufferList {
    let mut list = gst::BufferList::new_sized(packets.len());
    {
        let l = list.get_mut().expect("a new list is writable");
        for p in packets {
            let r = p.range();
            if r.end > memory.size() {
                continue;
            }
            let mut b = gst::Buffer::new();
            {
                let bm = b.get_mut().expect("a new buffer is writable");
                bm.append_memory(memory.share(r));
                bm.set_pts(pts);
                if let Some(c) = senders.as_deref_mut() {
                    c.attach(bm, &p.src);
                }
            }
            l.add(b);
        }
    }
    list
}

/// A buffer list of one buffer per datagram of the batch buffer `buf` (see
/// [`datagram_list_from`]); a buffer with no batch meta is one datagram.
pub fn datagram_list(buf: &gst::Buffer, mut senders: Option<&mut SenderCache>) -> gst::BufferList {
    let Some(meta) = buf.meta::<PacketBatchMeta>() else {
        let mut list = gst::BufferList::new_sized(1);
        list.get_mut()
            .expect("a new list is writable")
            .add(buf.clone());
        return list;
    };
    if buf.n_memory() == 1 {
        return datagram_list_from(buf.peek_memory(0), meta.packets(), buf.pts(), senders);
    }
    // Several memories (not what Firehose sources push): region copies share them.
    let mut list = gst::BufferList::new_sized(meta.packets().len());
    {
        let l = list.get_mut().expect("a new list is writable");
        for p in meta.packets() {
            if let Ok(mut b) = buf.copy_region(gst::BufferCopyFlags::MEMORY, p.range()) {
                let bm = b.get_mut().expect("a new buffer is writable");
                bm.set_pts(buf.pts());
                if let Some(c) = senders.as_deref_mut() {
                    c.attach(bm, &p.src);
                }
                l.add(b);
            }
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::property::PropertyGroup;

    fn info(offset: u32, len: u32) -> PacketInfo {
        PacketInfo {
            offset,
            len,
            ..Default::default()
        }
    }

    #[test]
    fn list_holds_exactly_the_datagrams() {
        gst::init().unwrap();
        // Datagrams in slots of 8 bytes, the rest of each slot unused.
        let mut buf = gst::Buffer::from_slice(b"aaaa____bbbbbb__cc______".to_vec());
        {
            let b = buf.get_mut().unwrap();
            b.set_pts(gst::ClockTime::from_mseconds(5));
            PacketBatchMeta::add(b, vec![info(0, 4), info(8, 6), info(16, 2)]);
        }
        let list = datagram_list(&buf, None);
        let got: Vec<Vec<u8>> = list
            .iter()
            .map(|b| b.map_readable().unwrap().to_vec())
            .collect();
        assert_eq!(got, [b"aaaa".to_vec(), b"bbbbbb".to_vec(), b"cc".to_vec()]);
        assert!(list
            .iter()
            .all(|b| b.pts() == Some(gst::ClockTime::from_mseconds(5))
                && b.meta::<PacketBatchMeta>().is_none()));
    }

    fn from(offset: u32, len: u32, src: &str) -> PacketInfo {
        PacketInfo {
            src: src.parse::<std::net::SocketAddr>().unwrap().into(),
            ..info(offset, len)
        }
    }

    fn sender(b: &gst::BufferRef) -> Option<(gio::SocketAddress, std::net::SocketAddr)> {
        let a = b.meta::<gst_net::NetAddressMeta>()?.addr();
        let inet = a.clone().downcast::<gio::InetSocketAddress>().unwrap();
        Some((a, inet.into()))
    }

    #[test]
    fn each_datagram_names_its_sender_from_one_shared_address_per_sender() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::from_slice(vec![0u8; 40]);
        PacketBatchMeta::add(
            buf.get_mut().unwrap(),
            vec![
                from(0, 4, "127.0.0.1:5000"),
                from(8, 4, "127.0.0.1:5000"),
                from(16, 4, "[::1]:6000"),
                from(24, 4, "127.0.0.1:5000"),
                info(32, 4), // a sender the source does not know
            ],
        );
        let mut cache = SenderCache::default();
        let list = datagram_list(&buf, Some(&mut cache));
        let got: Vec<_> = list.iter().map(sender).collect();
        let addrs: Vec<Option<std::net::SocketAddr>> =
            got.iter().map(|s| s.as_ref().map(|s| s.1)).collect();
        let want = [
            "127.0.0.1:5000",
            "127.0.0.1:5000",
            "[::1]:6000",
            "127.0.0.1:5000",
        ]
        .map(|a| Some(a.parse().unwrap()));
        assert_eq!(addrs[..4], want);
        assert_eq!(addrs[4], None, "no meta for an unknown sender");
        // One GSocketAddress per sender, shared by its datagrams.
        let obj = |i: usize| got[i].as_ref().unwrap().0.clone();
        assert_eq!(obj(0), obj(1));
        assert_eq!(obj(0), obj(3));
        assert_ne!(obj(0), obj(2));
        assert_eq!(cache.made(), 2);
        // The next batch from the same senders makes none.
        let again = datagram_list(&buf, Some(&mut cache));
        assert_eq!(sender(again.get(1).unwrap()).unwrap().0, obj(0));
        assert_eq!(cache.made(), 2);
        // Without a cache (retrieve-sender-address=false): no meta.
        assert!(datagram_list(&buf, None)
            .iter()
            .all(|b| sender(b).is_none()));
    }

    #[test]
    fn many_senders_are_each_made_once_until_the_cache_starts_over() {
        gst::init().unwrap();
        let peer = |i: usize| from(0, 1, &format!("10.0.{}.{}:{}", i / 256, i % 256, 7000 + i));
        let packets: Vec<PacketInfo> = (0..SENDER_CACHE).map(peer).collect();
        let mem = gst::Memory::from_slice(vec![0u8; 4]);
        let mut cache = SenderCache::default();
        let list = datagram_list_from(&mem, &packets, None, Some(&mut cache));
        for (b, p) in list.iter().zip(&packets) {
            assert_eq!(sender(b).unwrap().1, p.src.to_socket_addr());
        }
        let n = SENDER_CACHE as u64;
        assert_eq!(cache.made(), n);
        // Every one remembered, in any order.
        let mut rev = packets.clone();
        rev.reverse();
        datagram_list_from(&mem, &rev, None, Some(&mut cache));
        assert_eq!(cache.made(), n);
        // One more: the cache starts over with it.
        let list = datagram_list_from(&mem, &[peer(SENDER_CACHE)], None, Some(&mut cache));
        assert_eq!(
            sender(list.get(0).unwrap()).unwrap().1,
            peer(SENDER_CACHE).src.to_socket_addr()
        );
        assert_eq!(cache.made(), n + 1);
        datagram_list_from(&mem, &packets[..1], None, Some(&mut cache));
        assert_eq!(cache.made(), n + 2);
    }

    #[test]
    fn retrieve_sender_address_switches_the_meta() {
        gst::init().unwrap();
        let out = PacketOutput::default();
        let mem = gst::Memory::from_slice(vec![0u8; 4]);
        let packets = [from(0, 4, "127.0.0.1:5000")];
        assert!(sender(out.list_from(&mem, &packets, None).get(0).unwrap()).is_some());
        let mut settings = OutputSettings::default();
        assert_eq!(
            settings
                .get_named("retrieve-sender-address")
                .unwrap()
                .get::<bool>(),
            Ok(true)
        );
        assert!(settings.set_named("retrieve-sender-address", &false.to_value()));
        out.apply(&settings);
        assert!(sender(out.list_from(&mem, &packets, None).get(0).unwrap()).is_none());
    }

    #[test]
    fn out_of_range_datagram_is_left_out() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::from_slice(b"abcd".to_vec());
        PacketBatchMeta::add(buf.get_mut().unwrap(), vec![info(0, 2), info(2, 9)]);
        assert_eq!(datagram_list(&buf, None).len(), 1);
    }

    #[test]
    fn a_consumer_answers_the_packets_query_and_nothing_else() {
        gst::init().unwrap();
        let mut q = gst::query::Custom::new(gst::Structure::new_empty(PACKETS_QUERY));
        assert!(answer_packets_query(&mut q));
        assert_eq!(q.structure().unwrap().get::<bool>("understood"), Ok(true));
        let mut other = gst::query::Custom::new(gst::Structure::new_empty("other"));
        assert!(!answer_packets_query(&mut other));
        assert!(!answer_packets_query(&mut gst::query::Caps::new(None)));
    }
}
