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

/// The MTU of network interface `name` as the calling thread's network namespace sees
/// it (`SIOCGIFMTU` on a socket: sysfs would show the namespace it was mounted in), or
/// `None` where there is no such interface.
pub fn iface_mtu(name: &str) -> Option<u32> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    if name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return None;
    }
    // SAFETY: no pointers; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all zeroes is a valid (empty) request.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name (shorter than IFNAMSIZ, the rest
    // zero) and writes the MTU into the request it is given.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if r != 0 {
        return None;
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds the MTU.
    Some(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}

/// Watches the interface a running capture receives on: whether it still exists (with
/// the same index: deleted and made again is another interface) and is up. Checked at
/// most every [`LinkWatch::EVERY`], from a receive loop that found nothing to read, so a
/// busy capture never pays for it.
#[derive(Debug)]
pub struct LinkWatch {
    name: String,
    index: u32,
    next: std::time::Instant,
}

impl LinkWatch {
    /// How often [`LinkWatch::check`] looks.
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(500);

    /// Watches `name`, which has index `index` now.
    pub fn new(name: &str, index: u32) -> Self {
        Self {
            name: name.to_owned(),
            index,
            next: std::time::Instant::now() + Self::EVERY,
        }
    }

    /// `Err` with a message naming the interface once it is gone, replaced or down.
    pub fn check(&mut self, now: std::time::Instant) -> Result<(), String> {
        if now < self.next {
            return Ok(());
        }
        self.next = now + Self::EVERY;
        let name = &self.name;
        match iface_index(name) {
            Ok(i) if i == self.index => {}
            Ok(_) => {
                return Err(format!(
                    "network interface '{name}' was deleted and made again under the \
                     capture: it can no longer receive. Restart the capture"
                ))
            }
            Err(_) => {
                return Err(format!(
                    "network interface '{name}' disappeared under the capture (deleted, \
                     renamed or its driver unloaded): it can no longer receive"
                ))
            }
        }
        // IFF_UP, as `ip link` shows it; where sysfs does not say, assume up.
        let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/flags"))
            .ok()
            .and_then(|t| u32::from_str_radix(t.trim().trim_start_matches("0x"), 16).ok());
        if flags.is_some_and(|f| f & libc::IFF_UP as u32 == 0) {
            return Err(format!(
                "network interface '{name}' went down under the capture: it receives \
                 nothing until it is up again (ip link set {name} up), then restart the capture"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_of_loopback_and_of_no_interface() {
        let lo = iface_mtu("lo").expect("lo has an MTU");
        let sysfs: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(lo, sysfs);
        assert_eq!(iface_mtu("fh-no-such-if"), None);
        assert_eq!(iface_mtu("a-name-longer-than-ifnamsiz"), None);
    }

    #[test]
    fn a_watch_sees_loopback_up_and_a_missing_interface_gone() {
        let later = std::time::Instant::now() + LinkWatch::EVERY * 2;
        let mut lo = LinkWatch::new("lo", iface_index("lo").unwrap());
        assert_eq!(lo.check(later), Ok(()));
        let mut gone = LinkWatch::new("nosuchif0", 1234);
        assert_eq!(gone.check(std::time::Instant::now()), Ok(()), "not due yet");
        assert!(gone
            .check(later)
            .unwrap_err()
            .contains("'nosuchif0' disappeared"));
        let mut other = LinkWatch::new("lo", iface_index("lo").unwrap() + 1000);
        assert!(other.check(later).unwrap_err().contains("made again"));
    }

    #[test]
    fn loopback_has_an_index_and_unknown_names_are_named_in_the_error() {
        assert!(iface_index("lo").unwrap() > 0);
        assert!(iface_index("nosuchif0").unwrap_err().contains("nosuchif0"));
        assert!(iface_index("bad\0name").is_err());
    }
}
