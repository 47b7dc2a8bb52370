//! Getting bytes to disk fast and safely: files that only ever hold data that reached
//! them, written in aligned blocks with `O_DIRECT` ([`file`]), the
//! writer thread behind a bounded queue ([`writer`]), the staging of formatted records
//! into pool blocks ([`stage`]) and file-name templates ([`name`]). No GStreamer types.

pub mod file;
pub mod name;
pub mod stage;
pub mod writer;
