//! SPEAD item descriptors (the value of a DESCRIPTOR item is itself a SPEAD packet).
//!
//! (Parsing and encoding are being written; the type is fixed so the rest of the crate
//! can use it.)

/// One item's description.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// DESCRIPTOR_ID: the item id described.
    pub id: u64,
    /// DESCRIPTOR_NAME.
    pub name: String,
    /// DESCRIPTOR_DESCRIPTION.
    pub description: String,
    /// DESCRIPTOR_SHAPE: one entry per dimension; `None` = variable length.
    pub shape: Vec<Option<u64>>,
    /// DESCRIPTOR_FORMAT: (type char `u i f c b`, bits) pairs.
    pub format: Vec<(u8, u32)>,
    /// DESCRIPTOR_DTYPE: a numpy `.npy` header dict (overrides format and shape).
    pub dtype: Option<String>,
}
