//! Getting bytes to disk fast and safely: aligned files with `O_DIRECT` ([`file`]), the
//! writer thread behind a bounded queue ([`writer`]), the staging of formatted records
//! into pool blocks ([`stage`]) and file-name templates ([`name`]). No GStreamer types.

pub mod file;
pub mod inflight;
pub mod name;
pub mod stage;
pub mod writer;
