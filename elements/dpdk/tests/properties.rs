//! `mbuf-size`, the old name of `slot-size`, still sets it, through the element: the
//! ids the base appends after the subclass's own properties reach the right ones, and
//! the deprecated count `mbufs` follows the slot size set.

use gst::prelude::*;

#[test]
fn mbuf_size_still_sets_slot_size() {
    gst::init().unwrap();
    firehose_dpdk::register_static().unwrap();
    let el = gst::ElementFactory::make("fhdpdksrc").build().unwrap();
    el.set_property("mbuf-size", 4096u32);
    assert_eq!(el.property::<u32>("slot-size"), 4096);
    el.set_property("pool-size", 64u64 << 20);
    assert_eq!(el.property::<u32>("mbufs"), (64 << 20) / 4096);
    el.set_property("slot-size", 2048u32);
    assert_eq!(el.property::<u32>("mbuf-size"), 2048);
}
