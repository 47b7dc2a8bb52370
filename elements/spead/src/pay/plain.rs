//! Plain (non-heap) buffers: the one-item heap layout the properties describe, its
//! descriptors, and the items of each buffer's heap.

use super::settings::{parse_dtype, parse_immediates, parse_shape, Dtype, Immediate, Settings};
use crate::descriptor::Descriptor;
use crate::send::Item;
use crate::wire::{ids, Flavour};

/// What plain (non-heap) buffers become, from the properties.
#[derive(Clone, Debug)]
pub(super) struct PlainSpec {
    item_id: u64,
    name: String,
    description: String,
    dtype: Option<Dtype>,
    /// From `item-shape`; `None` = derived from the first buffer.
    shape: Option<Vec<Option<u64>>>,
    immediates: Vec<Immediate>,
    /// `timestamp-id` and `timestamp-step`: an immediate counting `k·step` in heap k.
    timestamp: Option<(u64, u64)>,
}

/// Python's repr of a tuple of dimensions: `()`, `(5,)`, `(4, 8)`.
fn py_tuple(dims: &[u64]) -> String {
    match dims {
        [] => "()".into(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl PlainSpec {
    /// Validates the plain-buffer properties for `flavour`, so that a bad one fails
    /// the state change instead of the first buffer.
    pub fn from_settings(s: &Settings, flavour: Flavour) -> Result<Self, String> {
        let dtype = match s.item_dtype.trim() {
            "" => None,
            d => Some(parse_dtype(d)?),
        };
        let shape = parse_shape(&s.item_shape)?;
        if dtype.is_some() && shape.as_ref().is_some_and(|d| d.contains(&None)) {
            return Err(
                "item-shape has a variable (None) dimension, which a numpy item-dtype \
                 cannot describe: give every dimension or leave item-dtype empty"
                    .into(),
            );
        }
        let immediates = parse_immediates(&s.immediates)?;
        // spead2 decodes names and descriptions as ASCII and fails on anything else.
        for text in [&s.item_name, &s.item_description]
            .into_iter()
            .chain(immediates.iter().map(|i| &i.name))
        {
            if !text.is_ascii() {
                return Err(format!(
                    "'{text}' is not ASCII: spead2 receivers cannot decode descriptor names \
                     and descriptions that are not"
                ));
            }
        }
        let timestamp = (s.timestamp_id != 0).then_some((s.timestamp_id, s.timestamp_step));
        let ids: Vec<u64> = immediates
            .iter()
            .map(|i| i.id)
            .chain(timestamp.map(|t| t.0))
            .chain([s.item_id])
            .collect();
        if let Some(dup) = ids
            .iter()
            .enumerate()
            .find_map(|(k, id)| ids[..k].contains(id).then_some(id))
        {
            return Err(format!(
                "item id {dup:#x} is used twice (immediates, timestamp-id, item-id)"
            ));
        }
        for &id in &ids {
            if id > flavour.max_id() || id <= ids::DESCRIPTOR_DTYPE {
                return Err(format!(
                    "item id {id:#x} is reserved or does not fit SPEAD-{flavour} \
                     (user ids are {:#x}..={:#x}; spead2 starts at 0x1000)",
                    ids::DESCRIPTOR_DTYPE + 1,
                    flavour.max_id()
                ));
            }
        }
        for imm in &immediates {
            if imm.value > flavour.max_value() {
                return Err(format!(
                    "immediate {:#x}={} does not fit the {} address bits of SPEAD-{flavour}",
                    imm.id,
                    imm.value,
                    flavour.heap_address_bits()
                ));
            }
        }
        Ok(Self {
            item_id: s.item_id,
            name: s.item_name.clone(),
            description: s.item_description.clone(),
            dtype,
            shape,
            immediates,
            timestamp,
        })
    }

    /// The descriptors, immediates first then the data item (the order of the items),
    /// for buffers of `len` bytes (the shape, when not given, comes from it).
    pub fn descriptors(&self, flavour: Flavour, len: usize) -> Result<Vec<Descriptor>, String> {
        let scalar = |id: u64, name: &str, description: &str| Descriptor {
            id,
            name: name.into(),
            description: description.into(),
            shape: Vec::new(),
            format: vec![(b'u', u32::from(flavour.heap_address_bits()))],
            dtype: None,
        };
        let mut out: Vec<Descriptor> = self
            .immediates
            .iter()
            .map(|imm| scalar(imm.id, &imm.name, ""))
            .collect();
        if let Some((id, step)) = self.timestamp {
            out.push(scalar(id, "timestamp", &format!("heap number * {step}")));
        }
        let data = match &self.dtype {
            None => Descriptor {
                id: self.item_id,
                name: self.name.clone(),
                description: self.description.clone(),
                // Bytes of any length unless a shape is given.
                shape: self.shape.clone().unwrap_or_else(|| vec![None]),
                format: vec![(b'u', 8)],
                dtype: None,
            },
            Some(dt) => {
                let dims: Vec<u64> = match &self.shape {
                    Some(d) => d.iter().map(|x| x.unwrap_or(0)).collect(),
                    None if (len as u64).is_multiple_of(dt.itemsize) => {
                        vec![len as u64 / dt.itemsize]
                    }
                    None => {
                        return Err(format!(
                            "the first buffer has {len} bytes, not a whole number of \
                             {}-byte {} elements: set item-shape or fix the buffer size",
                            dt.itemsize, dt.descr
                        ))
                    }
                };
                Descriptor {
                    id: self.item_id,
                    name: self.name.clone(),
                    description: self.description.clone(),
                    shape: dims.iter().copied().map(Some).collect(),
                    format: Vec::new(),
                    dtype: Some(format!(
                        "{{'descr': '{}', 'fortran_order': False, 'shape': {}}}",
                        dt.descr,
                        py_tuple(&dims)
                    )),
                }
            }
        };
        out.push(data);
        Ok(out)
    }

    /// Bytes every buffer must have, when the descriptor fixes it.
    pub fn fixed_len(&self, descriptor: &Descriptor) -> Option<u64> {
        let size = self.dtype.as_ref().map_or(1, |d| d.itemsize);
        descriptor
            .shape
            .iter()
            .try_fold(size, |acc, d| d.map(|d| acc * d))
    }

    /// The value items of the heap for one buffer of `data`, in the order of the
    /// descriptors: static immediates, the timestamp of the `sent`-th data heap, then
    /// the data item.
    pub fn items<'a>(
        &self,
        data: &'a [u8],
        sent: u64,
        flavour: Flavour,
        items: &mut Vec<Item<'a>>,
    ) {
        items.extend(
            self.immediates
                .iter()
                .map(|imm| Item::immediate(imm.id, imm.value)),
        );
        if let Some((id, step)) = self.timestamp {
            // Wraps like a hardware counter of the flavour's width.
            let value = sent.wrapping_mul(step) & flavour.max_value();
            items.push(Item::immediate(id, value));
        }
        items.push(Item::bytes(self.item_id, data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_as_numpy_writes_them() {
        let d = |s: &str| parse_dtype(s).map(|d| (d.descr, d.itemsize));
        assert_eq!(d("u1"), Ok(("|u1".into(), 1)));
        assert_eq!(d("<i2"), Ok(("<i2".into(), 2)));
        assert_eq!(d(">f4"), Ok((">f4".into(), 4)));
        assert_eq!(d("c8"), Ok(("<c8".into(), 8)));
        assert_eq!(d("|i1"), Ok(("|i1".into(), 1)));
        for bad in ["", "x4", "u3", "<f1", "c4", "i", "<", "µ4", "<é2"] {
            assert!(parse_dtype(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_and_immediates() {
        assert_eq!(parse_shape(""), Ok(None));
        assert_eq!(parse_shape("1024"), Ok(Some(vec![Some(1024)])));
        assert_eq!(parse_shape("(4, 256)"), Ok(Some(vec![Some(4), Some(256)])));
        assert_eq!(parse_shape("None,8"), Ok(Some(vec![None, Some(8)])));
        assert!(parse_shape("None,None").is_err());
        assert!(parse_shape("4,x").is_err());
        assert_eq!(
            parse_immediates("0x1600=5, sync:4097=0x10"),
            Ok(vec![
                Immediate {
                    id: 0x1600,
                    value: 5,
                    name: "item_0x1600".into()
                },
                Immediate {
                    id: 4097,
                    value: 16,
                    name: "sync".into()
                }
            ])
        );
        assert!(parse_immediates("0x1600").is_err());
        assert!(parse_immediates("a:b=c").is_err());
        assert_eq!(py_tuple(&[]), "()");
        assert_eq!(py_tuple(&[5]), "(5,)");
        assert_eq!(py_tuple(&[4, 8]), "(4, 8)");
    }

    #[test]
    fn plain_descriptors_follow_the_properties() {
        let f = Flavour::SPEAD_64_48;
        let mut s = Settings {
            immediates: "ts:0x1600=7".into(),
            ..Settings::default()
        };
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].id, d[0].name.as_str()), (0x1600, "ts"));
        assert_eq!(d[0].format, vec![(b'u', 48)]);
        assert!(d[0].shape.is_empty());
        assert_eq!((d[1].id, d[1].name.as_str()), (0x1000, "data"));
        assert_eq!(
            (d[1].shape.clone(), d[1].format.clone()),
            (vec![None], vec![(b'u', 8)])
        );
        assert_eq!(spec.fixed_len(&d[1]), None);

        s.item_dtype = "<i2".into();
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!(
            d[1].dtype.as_deref(),
            Some("{'descr': '<i2', 'fortran_order': False, 'shape': (50,)}")
        );
        assert_eq!(d[1].shape, vec![Some(50)]);
        assert_eq!(spec.fixed_len(&d[1]), Some(100));
        assert!(spec.descriptors(f, 101).is_err());

        s.item_shape = "5,10".into();
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 7).unwrap();
        assert_eq!(
            d[1].dtype.as_deref(),
            Some("{'descr': '<i2', 'fortran_order': False, 'shape': (5, 10)}")
        );
        assert_eq!(spec.fixed_len(&d[1]), Some(100));

        s.timestamp_id = 0x1601;
        s.timestamp_step = 2048;
        let spec = PlainSpec::from_settings(&s, f).unwrap();
        let d = spec.descriptors(f, 100).unwrap();
        assert_eq!((d[1].id, d[1].name.as_str()), (0x1601, "timestamp"));
        assert_eq!(
            d.last().unwrap().id,
            0x1000,
            "the data item's descriptor stays last"
        );
        s.timestamp_id = 0x1600;
        let e = PlainSpec::from_settings(&s, f).unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        s.timestamp_id = 0;

        s.item_description = "µs".into();
        let e = PlainSpec::from_settings(&s, f).unwrap_err();
        assert!(e.contains("ASCII"), "{e}");
        s.item_description.clear();

        s.item_shape = "None".into();
        assert!(PlainSpec::from_settings(&s, f).is_err());
        s.item_dtype.clear();
        s.item_id = 3;
        assert!(PlainSpec::from_settings(&s, f).is_err());
        s.item_id = 0x1000;
        s.immediates = "0x1600=281474976710656".into(); // 2^48
        assert!(PlainSpec::from_settings(&s, f).is_err());
    }
}
