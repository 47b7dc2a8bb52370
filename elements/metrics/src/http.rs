//! A tiny HTTP server for the exposition: `GET /metrics` (and `/`) on one thread.
//!
//! No GStreamer types and no HTTP library: a scrape is one short request every few
//! seconds, so one thread answering one connection at a time is plenty, and it keeps the
//! plugin free of an async runtime. Requests are read with a deadline and a size limit,
//! so a client that stalls or sends junk costs one timeout, never the server.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::exposition::Format;

/// The address served when none is given: localhost only, as counters are nobody
/// else's business unless the operator says so.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9400";

/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request head read; anything longer is refused.
const MAX_HEAD: usize = 16 * 1024;

/// Produces the exposition text for a format (called on every scrape).
pub type Render = dyn Fn(Format) -> String + Send + Sync;

/// A running metrics endpoint; stops (and joins its thread) when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Parses "ADDR:PORT", "PORT" or ":PORT" (the last two on 127.0.0.1).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let t = s.trim();
    let full = if let Some(port) = t.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else if t.parse::<u16>().is_ok() {
        format!("127.0.0.1:{t}")
    } else {
        t.to_string()
    };
    full.to_socket_addrs()
        .map_err(|e| format!("'{s}' is not ADDR:PORT ({e})"))?
        .next()
        .ok_or_else(|| format!("'{s}' resolves to no address"))
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free one) and serves `render`'s text from a thread.
    pub fn start(addr: SocketAddr, render: Arc<Render>) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("firehose-metrics".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        if let Ok(stream) = conn {
                            // A failed answer is the client's problem (it went away).
                            let _ = serve(stream, &*render);
                        }
                    }
                })?
        };
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address actually bound (with the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop with a connection of our own; it sees `stop` and ends.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(if wake.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// The parts of a request the server looks at.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    path: String,
    accept: Option<String>,
}

/// Reads the request line and headers (up to the blank line).
fn read_request(reader: &mut impl BufRead) -> io::Result<Request> {
    let mut head = Vec::new();
    let mut line = String::new();
    let mut first: Option<String> = None;
    let mut accept = None;
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take((MAX_HEAD - head.len().min(MAX_HEAD)) as u64 + 1)
            .read_line(&mut line)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(line.as_bytes());
        if head.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too long",
            ));
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        if first.is_none() {
            first = Some(l.to_string());
        } else if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("accept") {
                accept = Some(v.trim().to_string());
            }
        }
    }
    let first = first.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no request"))?;
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_string();
    Ok(Request {
        method,
        path,
        accept,
    })
}

fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn serve(mut stream: TcpStream, render: &Render) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let req = {
        let mut reader = BufReader::new(&mut stream);
        match read_request(&mut reader) {
            Ok(r) => r,
            Err(_) => {
                return respond(
                    &mut stream,
                    "400 Bad Request",
                    "text/plain",
                    "bad request\n",
                )
            }
        }
    };
    if req.method != "GET" && req.method != "HEAD" {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n",
        );
    }
    match req.path.as_str() {
        "/metrics" | "/" => {
            let format = Format::negotiate(req.accept.as_deref());
            let body = render(format);
            let body = if req.method == "HEAD" { "" } else { &body };
            respond(&mut stream, "200 OK", format.content_type(), body)
        }
        _ => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "Firehose metrics are at /metrics\n",
        ),
    }
}

/// Fetches `path` from a server at `addr` with `accept` (tests and `firehose` itself).
pub fn get(addr: SocketAddr, path: &str, accept: &str) -> io::Result<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no end of head"))?;
    Ok((head.to_string(), body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{encode, Sample};

    fn server() -> MetricsServer {
        let render: Arc<Render> = Arc::new(|f| {
            encode(
                &[Sample {
                    pipeline: "p".into(),
                    element: "e".into(),
                    factory: "f".into(),
                    values: vec![("packets".into(), 5)],
                    info: Vec::new(),
                    labelled: Vec::new(),
                }],
                f,
            )
        });
        MetricsServer::start(parse_addr("127.0.0.1:0").unwrap(), render).unwrap()
    }

    #[test]
    fn serves_both_formats_and_404() {
        let s = server();
        let addr = s.local_addr();
        assert_ne!(addr.port(), 0);
        let (head, body) = get(addr, "/metrics", "application/openmetrics-text").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("application/openmetrics-text"), "{head}");
        assert!(body.contains("firehose_packets_total{"), "{body}");
        assert!(body.ends_with("# EOF\n"));
        let (head, body) = get(addr, "/metrics?x=1", "*/*").unwrap();
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        assert!(!body.contains("EOF"));
        let (head, _) = get(addr, "/nope", "*/*").unwrap();
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        drop(s);
        // Stopped: nothing listens any more.
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_err());
    }

    #[test]
    fn junk_and_silent_clients_do_not_stop_the_server() {
        let s = server();
        let addr = s.local_addr();
        let mut junk = TcpStream::connect(addr).unwrap();
        junk.write_all(b"\r\n").unwrap();
        let mut reply = String::new();
        let _ = junk.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
        // A client that connects and says nothing costs one read timeout.
        let _silent = TcpStream::connect(addr).unwrap();
        let long = vec![b'x'; MAX_HEAD + 10];
        assert!(read_request(&mut io::Cursor::new(long)).is_err());
        let req = read_request(&mut io::Cursor::new(
            b"GET /metrics?a HTTP/1.1\r\nACCEPT: text/plain\r\n\r\n".to_vec(),
        ))
        .unwrap();
        assert_eq!(
            req,
            Request {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: Some("text/plain".into())
            }
        );
        let (head, _) = get(addr, "/metrics", "*/*").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("9400").unwrap().to_string(), "127.0.0.1:9400");
        assert_eq!(parse_addr(":9401").unwrap().to_string(), "127.0.0.1:9401");
        assert_eq!(parse_addr("0.0.0.0:1").unwrap().to_string(), "0.0.0.0:1");
        assert!(parse_addr("nowhere").is_err());
    }
}
