//! For tests of start errors: the one way to run a source until it refuses to start.

use gst::prelude::*;

/// Puts `src` (configured by the caller) before a `fakesink` in a pipeline, asserts that
/// it fails to start, and returns the text of the error message it posted. Panics if
/// the pipeline starts or no error is posted within 5 s.
pub fn source_start_error(src: &gst::Element) -> String {
    let sink = gst::ElementFactory::make("fakesink").build().unwrap();
    let p = gst::Pipeline::new();
    p.add_many([src, &sink]).unwrap();
    src.link(&sink).unwrap();
    assert!(
        p.set_state(gst::State::Playing).is_err(),
        "{} must fail to start",
        src.name()
    );
    let msg = p
        .bus()
        .unwrap()
        .timed_pop_filtered(gst::ClockTime::from_seconds(5), &[gst::MessageType::Error])
        .expect("an error message");
    p.set_state(gst::State::Null).unwrap();
    match msg.view() {
        gst::MessageView::Error(e) => e.error().to_string(),
        _ => unreachable!("filtered on errors"),
    }
}
