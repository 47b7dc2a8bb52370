//! Network interfaces by name: the one lookup every source that takes an `interface`
//! property shares (`fhudpsrc`/`fhudpsink` multicast, `fhxdpsrc`, `fhibvsrc`).

/// The index of network interface `name`, or an error naming it that a user can act on.
pub fn iface_index(name: &str) -> Result<u32, String> {
    let cname = std::ffi::CString::new(name).map_err(|_| format!("bad interface name '{name}'"))?;
    // SAFETY: cname is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if idx == 0 {
        Err(format!(
            "unknown network interface '{name}' (see `ip link` for the interfaces here)"
        ))
    } else {
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_an_index_and_unknown_names_are_named_in_the_error() {
        assert!(iface_index("lo").unwrap() > 0);
        assert!(iface_index("nosuchif0").unwrap_err().contains("nosuchif0"));
        assert!(iface_index("bad\0name").is_err());
    }
}
