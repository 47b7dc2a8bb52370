//! `fhcudaupload`: buffers to CUDA device memory, by asynchronous DMA from pinned host
//! memory.
//!
//! Input: Firehose packet batches, SPEAD heaps, chunks, or any bytes. Output: the same
//! caps with the `memory:CUDAMemory` feature; each buffer holds one device memory
//! ([`crate::devmem`]) and keeps the input's timestamps and metas, plus the
//! `FirehoseCudaMeta` custom meta with the device pointer. Where libgstcuda is present
//! the memory is a `GstCudaMemory` ([`crate::gstcuda`]), and downstream elements that
//! take only `video/x-raw(memory:CUDAMemory)` (`cudadownload`, nvcodec) get an RGBA
//! view of the bytes instead of our caps. Copies run on the element's
//! own CUDA stream, at most `max-in-flight` at once, each closed by an event; a buffer
//! goes downstream (and its host memory back to its pool) once its copy has completed,
//! in input order.
//!
//! Upstream sources that own a receive pool are offered pinned memory in the allocation
//! query, so they receive straight into memory the device reads; other input goes
//! through a pinned bounce pool (`bounce-copies` in stats). `layout=payloads` gathers a
//! packet batch's payloads into one block, followed by an offsets table.
//!
//! The CUDA driver is loaded when the element starts, not when the plugin loads: on a
//! machine without it the element fails to start with an error naming `libcuda.so.1`.

use gst::glib;
use gst::prelude::*;

mod imp;

#[doc(hidden)]
pub use imp::set_backend_for_tests as imp_set_backend_for_tests;
pub use imp::{BackendFactory, Opened, UploadLayout};

glib::wrapper! {
    /// The `fhcudaupload` element.
    pub struct CudaUpload(ObjectSubclass<imp::CudaUpload>) @extends gst::Element, gst::Object;
}

/// Registers `fhcudaupload` with `plugin` (or with the process when `None`).
pub fn register(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    gst::Element::register(
        plugin,
        "fhcudaupload",
        gst::Rank::NONE,
        CudaUpload::static_type(),
    )
}
