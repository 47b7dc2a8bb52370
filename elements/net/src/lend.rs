//! Lending a source's receive to the element right after it: `fhudpsrc` asks downstream
//! (a custom query, [`LENDER_QUERY`]) whether its peer can take datagrams straight from
//! the socket into its own memory, and if the peer answers with a [`ReceiveLender`],
//! `fhudpsrc` calls it with its socket instead of receiving into a batch. What the lender
//! made (heaps, say) leaves it on the next buffer `fhudpsrc` pushes: an empty batch, so
//! that everything keeps its order and passes the pads as usual. This is how
//! `fhudpsrc ! speaddepay` receives payloads straight into heap memory (see
//! `firehose_net::direct`): the kernel's copy is then the only one.
//!
//! Only while the lender's pad is `fhudpsrc`'s peer (checked before every receive): with
//! a queue or a tee in between, `fhudpsrc` receives into batches as always.

use std::io;
use std::sync::Arc;

use gst::glib;
use gst::prelude::*;

use crate::recv::{RecvCounts, UdpReceiver};

/// Name of the custom query structure; the lender's answer is in its [`LENDER_FIELD`].
pub const LENDER_QUERY: &str = "firehose-receive-lender";
/// The field holding the [`Lender`].
pub const LENDER_FIELD: &str = "lender";

/// An element that receives datagrams from a source's socket into its own memory.
pub trait ReceiveLender: Send + Sync {
    /// Receives what `rx` has queued now (without waiting) and takes it, remembering
    /// `stamp` for what it starts; what it finishes waits for the next buffer the source
    /// pushes. `Ok(None)`: it cannot now (stopped, flushing, another mode), and the
    /// source should receive into batches itself.
    fn receive(&self, rx: &mut UdpReceiver, stamp: Option<u64>) -> io::Result<Option<RecvCounts>>;
}

/// A lender and the pad it answers for (a boxed type, to travel in a query).
#[derive(Clone, glib::Boxed)]
#[boxed_type(name = "GstFhReceiveLender")]
pub struct Lender {
    /// Who receives.
    pub lender: Arc<dyn ReceiveLender>,
    /// Its sink pad: lending holds only while it is the source pad's peer.
    pub pad: gst::Pad,
}

impl std::fmt::Debug for Lender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lender").field("pad", &self.pad).finish()
    }
}

/// Answers a [`LENDER_QUERY`] with `lender` (from the lender's sink pad query handler).
/// Returns true if `query` was one.
pub fn answer(query: &mut gst::QueryRef, lender: impl FnOnce() -> Option<Lender>) -> bool {
    let gst::QueryViewMut::Custom(q) = query.view_mut() else {
        return false;
    };
    if q.structure().is_none_or(|s| s.name() != LENDER_QUERY) {
        return false;
    }
    let Some(l) = lender() else {
        return false;
    };
    q.structure_mut().set(LENDER_FIELD, l);
    true
}

/// Asks `pad`'s peer for a lender (from the source, before it receives).
pub fn ask(pad: &gst::Pad) -> Option<Lender> {
    let mut q = gst::query::Custom::new(gst::Structure::new_empty(LENDER_QUERY));
    if !pad.peer_query(&mut q) {
        return None;
    }
    q.structure()?.get::<Lender>(LENDER_FIELD).ok()
}

/// True while `lender` answers for `pad`'s peer.
pub fn lends_to(lender: &Lender, pad: &gst::Pad) -> bool {
    pad.peer().is_some_and(|p| p == lender.pad)
}
