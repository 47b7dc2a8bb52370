//! Address and interface helpers shared by the UDP source and sink.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// Resolves `host` (a literal address or a name) and `port` to one socket address,
/// preferring IPv4 when a name has both.
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, port));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host '{host}': {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("host '{host}' has no address"))
}

/// Parses a `clients` list: `host:port` entries separated by commas (IPv6 as
/// `[addr]:port`). Empty entries are ignored.
pub fn parse_clients(list: &str) -> Result<Vec<SocketAddr>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (host, port) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("client '{entry}' is not host:port"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("client '{entry}' has an invalid port"))?;
            resolve(host, port)
        })
        .collect()
}

/// The first IPv4 address of interface `name`, if it has one.
pub fn iface_ipv4(name: &str) -> Option<std::net::Ipv4Addr> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifap with a list we free below; we only read it.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return None;
        }
        let mut cur = ifap;
        let mut found = None;
        while !cur.is_null() {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
                && std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes()
            {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
                break;
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(ifap);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_literals_and_localhost() {
        assert_eq!(
            resolve("127.0.0.1", 5).unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
        assert_eq!(resolve("::1", 5).unwrap(), "[::1]:5".parse().unwrap());
        assert!(resolve("localhost", 5).unwrap().ip().is_loopback());
    }

    #[test]
    fn parses_client_lists() {
        let v = parse_clients("127.0.0.1:5000, [::1]:6000,").unwrap();
        assert_eq!(
            v,
            vec![
                "127.0.0.1:5000".parse().unwrap(),
                "[::1]:6000".parse().unwrap()
            ]
        );
        assert!(parse_clients("127.0.0.1").is_err());
        assert!(parse_clients("127.0.0.1:notaport").is_err());
    }

    #[test]
    fn interfaces() {
        assert_eq!(iface_ipv4("lo"), Some(std::net::Ipv4Addr::LOCALHOST));
    }
}
