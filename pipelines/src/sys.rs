//! Small operating-system helpers for `bench` and `demo`: CPU time, kernel UDP counters,
//! sysctls, the date.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

/// User + system CPU seconds used so far by this process (all threads).
pub fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` only writes into the zero-initialised struct we pass it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Busy CPU seconds of the whole machine so far, all CPUs together (user, nice,
/// system, irq, softirq, steal from `/proc/stat`; not idle or iowait). Counts kernel work
/// that no process is charged for, such as packet processing in softirq context.
pub fn host_busy_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_host_busy(&text).unwrap_or(0.0) / clock_ticks()
}

/// Busy jiffies from the `cpu` line of `/proc/stat` text.
fn parse_host_busy(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let field = |i: usize| v.get(i).copied().unwrap_or(0.0);
    Some(field(0) + field(1) + field(2) + field(5) + field(6) + field(7))
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// True when running as root (then sysctls can be raised).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Datagrams the kernel dropped at the UDP sockets bound to local `port` (their receive
/// buffers were full), from the `drops` column of /proc/net/udp and /proc/net/udp6:
/// one receiver's own count, where /proc/net/snmp's counters are the whole host's.
/// `None` when no such socket is listed.
pub fn udp_socket_drops(port: u16) -> Option<u64> {
    let mut found = None;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Some(d) = parse_socket_drops(&text, port) {
                found = Some(found.unwrap_or(0) + d);
            }
        }
    }
    found
}

/// The summed `drops` of the sockets with local port `port` in the text of
/// /proc/net/udp (or udp6); `None` when there is none.
pub fn parse_socket_drops(text: &str, port: u16) -> Option<u64> {
    let want = format!("{port:04X}");
    let mut found = None;
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode ref
        // pointer drops
        let local_port = fields.get(1).and_then(|a| a.rsplit(':').next());
        if local_port != Some(want.as_str()) {
            continue;
        }
        if let Some(d) = fields.last().and_then(|d| d.parse::<u64>().ok()) {
            found = Some(found.unwrap_or(0) + d);
        }
    }
    found
}

/// Kernel-wide IPv4 UDP error counters from /proc/net/snmp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// Datagrams that could not be delivered (includes `rcvbuf_errors`).
    pub in_errors: u64,
    /// Datagrams dropped because a socket's receive buffer was full.
    pub rcvbuf_errors: u64,
}

impl UdpCounters {
    /// Reads the counters now.
    pub fn read() -> io::Result<Self> {
        Self::parse(&std::fs::read_to_string("/proc/net/snmp")?).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "no Udp: lines in /proc/net/snmp",
            )
        })
    }

    /// Parses the text of /proc/net/snmp: a `Udp:` header line then a `Udp:` value line.
    pub fn parse(text: &str) -> Option<Self> {
        let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
        let header: Vec<&str> = udp.next()?.split_whitespace().collect();
        let values: Vec<&str> = udp.next()?.split_whitespace().collect();
        let get = |name: &str| -> Option<u64> {
            let i = header.iter().position(|h| *h == name)?;
            values.get(i)?.parse().ok()
        };
        Some(Self {
            in_errors: get("InErrors")?,
            rcvbuf_errors: get("RcvbufErrors")?,
        })
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            in_errors: self.in_errors.saturating_sub(earlier.in_errors),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(earlier.rcvbuf_errors),
        }
    }
}

/// Reads an integer sysctl, e.g. `net.core.rmem_max`.
pub fn sysctl(name: &str) -> io::Result<u64> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(&path)?
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {e}")))
}

/// Writes an integer sysctl (root only), like `sysctl -w`.
pub fn set_sysctl(name: &str, value: u64) -> io::Result<()> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::write(path, value.to_string())
}

/// Raises sysctl `name` to at least `min` when possible. Returns a sentence for the
/// report: what was done, or what the user should do.
pub fn ensure_sysctl_at_least(name: &str, min: u64) -> String {
    match sysctl(name) {
        Ok(v) if v >= min => format!("{name} = {v}"),
        Ok(v) if is_root() => match set_sysctl(name, min) {
            Ok(()) => format!("{name} raised from {v} to {min} (sysctl -w {name}={min})"),
            Err(e) => format!("{name} = {v}; raising it to {min} failed: {e}"),
        },
        Ok(v) => format!(
            "{name} = {v}, below {min}: socket buffers are capped (run as root or: sysctl -w {name}={min})"
        ),
        Err(e) => format!("{name} unreadable: {e}"),
    }
}

/// The kernel release, e.g. "6.1.0-18-amd64".
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// "YYYY-MM-DD HH:MM:SS UTC" for the current time.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// "YYYY-MM-DD HH:MM:SS UTC" for `secs` since the Unix epoch.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days → civil date algorithm (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The number of CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn snmp_parse() {
        let text = "Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 10 0 7 12 5 0\nUdpLite: InDatagrams\nUdpLite: 0\n";
        let c = UdpCounters::parse(text).unwrap();
        assert_eq!(
            c,
            UdpCounters {
                in_errors: 7,
                rcvbuf_errors: 5
            }
        );
        assert!(UdpCounters::read().is_ok());
    }

    #[test]
    fn socket_drops_parse_and_a_real_socket_is_found() {
        let text = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
 1: 0100007F:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 12\n\
 2: 00000000:1F90 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0000000000000000 3\n\
 3: 0100007F:1F91 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 0000000000000000 99\n";
        assert_eq!(parse_socket_drops(text, 8080), Some(15));
        assert_eq!(parse_socket_drops(text, 8081), Some(99));
        assert_eq!(parse_socket_drops(text, 80), None);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert_eq!(udp_socket_drops(port), Some(0));
    }

    #[test]
    fn cpu_time_moves() {
        let a = cpu_seconds();
        // Spin (not sleep) for 50 ms of wall time: that much CPU must show up.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_seconds() > a);
    }

    #[test]
    fn host_busy_adds_the_busy_columns() {
        let text = "cpu  100 5 50 1000 7 3 11 2 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(
            super::parse_host_busy(text),
            Some(100.0 + 5.0 + 50.0 + 3.0 + 11.0 + 2.0)
        );
        assert!(super::host_busy_seconds() > 0.0);
    }
}
