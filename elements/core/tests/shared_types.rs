//! Each plugin links its own copy of firehose-core; in one process the copy loaded
//! second must use the types the first registered instead of failing (GLib refuses a
//! second registration of a name, and glib-rs's derive turns that into a panic). Here
//! "the first copy" is played by registering the enum type by hand before this copy's
//! code asks for it.

use std::ffi::CStr;

use firehose_core::props::Memory;
use gst::glib;
use gst::glib::gobject_ffi::GEnumValue;
use gst::prelude::*;

#[test]
fn an_enum_type_registered_by_another_copy_is_found_and_used() {
    gst::init().unwrap();
    // The other copy's table: the same values (the same source).
    let value = |value, name: &'static CStr, nick: &'static CStr| GEnumValue {
        value,
        value_name: name.as_ptr(),
        value_nick: nick.as_ptr(),
    };
    let end = GEnumValue {
        value: 0,
        value_name: std::ptr::null(),
        value_nick: std::ptr::null(),
    };
    let values: &'static mut [GEnumValue; 4] = Box::leak(Box::new([
        value(0, c"Auto", c"auto"),
        value(1, c"Hugepages", c"hugepages"),
        value(2, c"System", c"system"),
        end,
    ]));
    // SAFETY: a NUL-terminated name and a NULL-terminated table that lives for ever.
    let theirs: glib::Type = unsafe {
        glib::translate::from_glib(glib::gobject_ffi::g_enum_register_static(
            c"GstFhMemory".as_ptr(),
            values.as_ptr(),
        ))
    };
    assert!(theirs.is_valid());
    // This copy's code: no panic, the same type, values round-trip.
    assert_eq!(Memory::static_type(), theirs);
    let v = Memory::System.to_value();
    assert_eq!(v.get::<Memory>().unwrap(), Memory::System);
    let spec = glib::ParamSpecEnum::builder_with_default("memory", Memory::Auto).build();
    assert_eq!(spec.value_type(), theirs);
}
