//! Firehose GPU upload.
//!
//! - [`engine`]: host buffers to device blocks through a ring of asynchronous copies,
//!   each closed by an event, behind a small [`engine::Backend`] trait; no GStreamer
//!   types, tested with the host backend of [`testing`].
//! - [`driver`]: the CUDA backend and pinned-memory registration, through cudarc's
//!   driver bindings loaded at run time (`libcuda.so.1`): the plugin builds with no
//!   CUDA toolkit and loads on machines without a GPU; only starting `fhcudaupload`
//!   needs the driver, and its absence is an element error that says how to check.
//! - `fhcudaupload` ([`upload`]): the element.
//! - [`devmem`]: the device memory of output buffers, as Rust and Python see it.
//! - [`gstcuda`]: GStreamer's CUDA library (libgstcuda-1.0), opened at run time where
//!   present: output in `GstCudaMemory`, which stock CUDA elements take.
//! - [`rawloop`]: the bare copy loop `firehose bench gpu` compares the element with.
//!
//! docs/gpu.md is the user guide.

#![warn(missing_docs)]

use gst::glib;

pub mod devmem;
pub mod driver;
pub mod engine;
pub mod gstcuda;
pub mod rawloop;
pub mod testing;
pub mod upload;

pub use upload::imp_set_backend_for_tests as set_backend_for_tests;

#[cfg(test)]
mod engine_tests;

/// Registers `fhcudaupload` with `plugin` (or with the process when `None`, as tests
/// do). Touches no CUDA library.
pub fn register_elements(plugin: Option<&gst::Plugin>) -> Result<(), glib::BoolError> {
    upload::register(plugin)
}

/// Registers `fhcudaupload`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    register_elements(Some(plugin))
}
