//! The fuzz inputs' packet framing, shared by the targets: each packet a big-endian
//! u16 length and that many bytes (a short last packet is taken as it is).

/// The packets framed in `data`, in order.
pub fn packets(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let (packet, tail) = if data.len() < 2 {
            (data, &[][..])
        } else {
            let n = usize::from(u16::from_be_bytes([data[0], data[1]]));
            let body = &data[2..];
            body.split_at(n.min(body.len()))
        };
        data = tail;
        Some(packet)
    })
}
