//! (in progress) the firehose command.
fn main() {
    gst::init().unwrap();
    gstfirehose::register_static().unwrap();
}
