//! `firehose launch --metrics`: the counters of a live pipeline, checked by the real tools:
//! `promtool check metrics` on the exposition, and Debian's `prometheus` scraping it and
//! answering a query through its HTTP API.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{run_code, spawn, temp_path};
use firehose_metrics::http::get;

/// The address `firehose` printed in "metrics at http://ADDR/metrics".
fn metrics_addr(stderr: &str) -> SocketAddr {
    let start = stderr.find("metrics at http://").expect("address printed") + 18;
    let rest = &stderr[start..];
    rest[..rest.find("/metrics").unwrap()].parse().unwrap()
}

/// The value of the first sample line of `series` for element `element`.
fn value(body: &str, series: &str, element: &str) -> Option<f64> {
    body.lines()
        .find(|l| {
            l.starts_with(&format!("{series}{{")) && l.contains(&format!("element=\"{element}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A free TCP port on localhost (bound then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child when the test ends, whichever way.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first result's value in a Prometheus `/api/v1/query` JSON answer.
fn query_value(json: &str) -> Option<f64> {
    // {"status":"success","data":{"resultType":"vector","result":[{"metric":{…},"value":[1700000000.1,"6400"]}]}}
    let v = &json[json.find("\"value\":[")? + 9..];
    let v = &v[v.find(",\"")? + 2..];
    v[..v.find('"')?].parse().ok()
}

/// The JSON body of Prometheus' HTTP API at `path`.
fn api(web: SocketAddr, path: &str) -> String {
    get(web, path, "application/json").unwrap().1
}

/// What `probe` gives once it succeeds, tried every 200 ms; past `within`, panics with
/// what its last try said.
fn poll<T>(within: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match probe() {
            Ok(v) => return v,
            Err(last) => assert!(Instant::now() < deadline, "{last}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn prometheus_scrapes_a_live_pipeline() {
    let mut fh = spawn(&[
        "launch",
        "-q",
        "--metrics",
        "127.0.0.1:0",
        "fhtestsrc name=src rate=200000000 packet-size=1472 ! fhcheck name=check",
    ]);
    assert!(
        fh.wait_stderr("firehose: running", Duration::from_secs(10)),
        "{}",
        fh.stderr_now()
    );
    let addr = metrics_addr(&fh.stderr_now());
    assert!(addr.ip().is_loopback());

    // Straight from the endpoint: both elements, counters moving, promtool satisfied.
    let (_, first) = get(addr, "/metrics", "text/plain").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (head, body) = get(addr, "/metrics", "text/plain").unwrap();
    assert!(head.contains("version=0.0.4"), "{head}");
    let p0 = value(&first, "firehose_packets_total", "src").expect("src packets");
    let p1 = value(&body, "firehose_packets_total", "src").unwrap();
    assert!(p1 > p0, "counter moves: {p0} then {p1}");
    assert!(
        value(&body, "firehose_packets_total", "check").is_some(),
        "{body}"
    );
    assert_eq!(
        value(&body, "firehose_lost_total", "check"),
        Some(0.0),
        "{body}"
    );
    if let Err(said) = firehose_metrics::promtool::check_metrics(&body) {
        panic!("promtool: {said}\n{body}");
    }

    // Prometheus itself scrapes it (asking for OpenMetrics) and answers a query.
    let dir = temp_path("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: firehose\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus: install the Debian package `prometheus`");
    let _prometheus = KillOnDrop(prometheus);
    let query = "/api/v1/query?query=firehose_packets_total%7Belement%3D%22src%22%2Cjob%3D%22firehose%22%7D";
    let seen = poll(Duration::from_secs(20), || {
        get(web, query, "application/json")
            .ok()
            .and_then(|(_, json)| query_value(&json))
            .ok_or_else(|| "prometheus never saw the counter".to_string())
    });
    let (_, now) = get(addr, "/metrics", "text/plain").unwrap();
    let latest = value(&now, "firehose_packets_total", "src").unwrap();
    assert!(
        seen > 0.0 && seen <= latest,
        "prometheus saw {seen}, now {latest}"
    );
    // The gauge kept its type through OpenMetrics (no _total), and the target is healthy.
    let json = api(web, "/api/v1/query?query=firehose_pool_in_use");
    assert!(json.contains("\"element\":\"src\""), "{json}");
    // Metadata keyed by the OpenMetrics family name (no _total) shows Prometheus read the
    // OpenMetrics exposition, and read it as a counter.
    poll(Duration::from_secs(10), || {
        let meta = api(web, "/api/v1/metadata?metric=firehose_packets");
        if meta.contains("\"type\":\"counter\"") {
            Ok(())
        } else {
            Err(format!("no counter metadata: {meta}"))
        }
    });
    // The info sample (OpenMetrics type info) carries the pool's memory as a label.
    let json = api(
        web,
        "/api/v1/query?query=firehose_element_info%7Belement%3D%22src%22%7D",
    );
    assert!(json.contains("\"memory\":\""), "{json}");
    let targets = api(web, "/api/v1/targets");
    assert!(targets.contains("\"health\":\"up\""), "{targets}");

    fh.signal(libc::SIGINT);
    let out = fh.finish(Duration::from_secs(10));
    assert_eq!(out.code, Some(0), "{}", out.all());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    for (at, needles) in [
        (port.as_str(), &["cannot serve metrics on 127.0.0.1:"][..]),
        ("nowhere", &[]),
    ] {
        let args = [
            "launch",
            "--metrics",
            at,
            "fakesrc num-buffers=1 ! fakesink",
        ];
        run_code(&args, Duration::from_secs(10), 2).assert_stderr(needles);
    }
}
