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
//! Why a query and not the consumers' caps: a consumer that records or forwards any
//! buffer (`fhrecordsink` after a stock `udpsrc caps=application/x-rtp`, `fhudpsink`
//! after an RTP payloader) must keep ANY caps, or linking such a stock element to it
//! fails (the link check intersects both pads' unfiltered caps); and an ANY answer
//! cannot tell a Firehose consumer from `filesink`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gst::glib;
use gst::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_src::CreateSuccess;

use crate::batch::{PacketBatchMeta, PacketInfo};
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

#[derive(Debug, Default)]
struct Settings {
    output: Output,
    caps: Option<gst::Caps>,
}

/// The `output` and `caps` properties of a packet source, and what it negotiated.
#[derive(Debug, Default)]
pub struct PacketOutput {
    settings: Mutex<Settings>,
    /// Negotiated: one buffer per datagram in a list (else one batch buffer).
    list: AtomicBool,
}

impl PacketOutput {
    /// The `output` and `caps` properties.
    pub fn param_specs() -> Vec<glib::ParamSpec> {
        vec![
            glib::ParamSpecEnum::builder::<Output>("output")
                .nick("Output")
                .blurb(
                    "batch: one buffer per batch (application/x-firehose-packets); list: one \
                     buffer per datagram in a buffer list (for stock elements); auto: batch \
                     when downstream understands packet batches, list otherwise",
                )
                .mutable_ready()
                .build(),
            glib::ParamSpecBoxed::builder::<gst::Caps>("caps")
                .nick("Caps")
                .blurb(
                    "Caps of the datagrams when they go out one per buffer (e.g. \
                     application/x-rtp,…; unset: application/octet-stream)",
                )
                .mutable_ready()
                .build(),
        ]
    }

    /// Sets `output` or `caps`; false for another property.
    pub fn set(&self, value: &glib::Value, pspec: &glib::ParamSpec) -> bool {
        let mut s = lock(&self.settings);
        match pspec.name() {
            "output" => s.output = value.get().expect("type checked upstream"),
            "caps" => s.caps = value.get().expect("type checked upstream"),
            _ => return false,
        }
        true
    }

    /// The value of `output` or `caps`; `None` for another property.
    pub fn get(&self, pspec: &glib::ParamSpec) -> Option<glib::Value> {
        let s = lock(&self.settings);
        Some(match pspec.name() {
            "output" => s.output.to_value(),
            "caps" => s.caps.to_value(),
            _ => return None,
        })
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
            CreateSuccess::NewBufferList(datagram_list(&buf))
        } else {
            CreateSuccess::NewBuffer(buf)
        }
    }
}

/// A buffer list of one buffer per datagram of `packets` in `memory`, each a
/// sub-memory (no copy), stamped `pts`.
pub fn datagram_list_from(
    memory: &gst::MemoryRef,
    packets: &[PacketInfo],
    pts: Option<gst::ClockTime>,
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
            }
            l.add(b);
        }
    }
    list
}

/// A buffer list of one buffer per datagram of the batch buffer `buf` (see
/// [`datagram_list_from`]); a buffer with no batch meta is one datagram.
pub fn datagram_list(buf: &gst::Buffer) -> gst::BufferList {
    let Some(meta) = buf.meta::<PacketBatchMeta>() else {
        let mut list = gst::BufferList::new_sized(1);
        list.get_mut()
            .expect("a new list is writable")
            .add(buf.clone());
        return list;
    };
    if buf.n_memory() == 1 {
        return datagram_list_from(buf.peek_memory(0), meta.packets(), buf.pts());
    }
    // Several memories (not what Firehose sources push): region copies share them.
    let mut list = gst::BufferList::new_sized(meta.packets().len());
    {
        let l = list.get_mut().expect("a new list is writable");
        for p in meta.packets() {
            if let Ok(mut b) = buf.copy_region(gst::BufferCopyFlags::MEMORY, p.range()) {
                b.get_mut()
                    .expect("a new buffer is writable")
                    .set_pts(buf.pts());
                l.add(b);
            }
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let list = datagram_list(&buf);
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

    #[test]
    fn out_of_range_datagram_is_left_out() {
        gst::init().unwrap();
        let mut buf = gst::Buffer::from_slice(b"abcd".to_vec());
        PacketBatchMeta::add(buf.get_mut().unwrap(), vec![info(0, 2), info(2, 9)]);
        assert_eq!(datagram_list(&buf).len(), 1);
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
