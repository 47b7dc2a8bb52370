//! `examples/endpoints.py`, the Python example of an endpoint list, run as users run it:
//! the system Python with the plugin on GST_PLUGIN_PATH. It lists three loopback
//! endpoints on two ports, sends to each and to an address it did not list, and prints
//! per endpoint the datagrams the batch metas say went there and the source's own count
//! (its `stats`' `endpoints`), then the filtered count. Both must be exact.

use firehose_tests::{plugin_dir, spawn_system_python};

const PER_ENDPOINT: u64 = 60;

#[test]
fn python_reads_each_datagrams_endpoint_and_the_counts_per_endpoint() {
    let plugins = plugin_dir("py-endpoints");
    let child = spawn_system_python(
        &plugins,
        "examples/endpoints.py",
        &[&PER_ENDPOINT.to_string()],
    );
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    let want =
        format!(": {PER_ENDPOINT} datagrams in the metas, {PER_ENDPOINT} counted by the source");
    for (line, addr) in lines.iter().zip(["127.0.0.1:", "127.0.0.2:", "127.0.0.3:"]) {
        assert!(
            line.starts_with(addr) && line.ends_with(&want),
            "{line:?} in {stdout}"
        );
    }
    // One stray per ten rounds, to the unlisted 127.0.0.4 on the wildcard-bound port.
    assert_eq!(
        lines[3],
        format!("filtered {}", PER_ENDPOINT.div_ceil(10)),
        "{stdout}"
    );
}
