//! `examples/spead_over_xdp.py`, the Python example of an engine over AF_XDP
//! (`fhspeadsrc transport="fhxdpsrc …"`), run as users run it: the system Python with the
//! plugin on GST_PLUGIN_PATH, capturing on the host end of a veth pair while this test
//! sends a SPEAD stream from the namespace. Every heap must be reported complete with its
//! items, in order, and the element's stats must count each datagram copied once. Needs
//! root (namespaces, AF_XDP), as the other veth tests.

use std::io::BufRead;
use std::net::UdpSocket;
use std::time::Duration;

use firehose_spead::send::{Item, PacketConfig};
use firehose_spead::wire::Flavour;
use firehose_testkit::netns::VethPair;
use firehose_tests::{first_line, spawn_system_python, stderr_of};

const HEAPS: u64 = 12;
const ITEM: usize = 48 << 10;
const PORT: u16 = 7440;

/// The stream: HEAPS heaps of an immediate and one ITEM-byte item, then a stop heap.
fn packets() -> Vec<Vec<u8>> {
    let cfg = PacketConfig::new(Flavour::SPEAD_64_48, 1472).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1472];
    for cnt in 1..=HEAPS + 1 {
        let data = vec![cnt as u8; ITEM];
        let items = if cnt <= HEAPS {
            vec![Item::immediate(0x1600, cnt), Item::bytes(0x1000, &data)]
        } else {
            vec![Item::stop()]
        };
        let mut heap = cfg.heap(cnt, &items).unwrap();
        while let Some(n) = heap.write_next(&mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

#[test]
fn python_receives_spead_over_af_xdp_into_heaps() {
    let pair = VethPair::create("py").expect("needs root and iproute2");
    pair.pin_host_neighbour().unwrap();
    let plugins = firehose_tests::plugin_dir("py-xdp");
    let mut child = spawn_system_python(
        &plugins,
        "examples/spead_over_xdp.py",
        &[
            pair.host_if.as_str(),
            &PORT.to_string(),
            "mode=generic",
            "hugepages=off",
        ],
    );
    let (stdout, first) = first_line(&mut child);
    if first.trim() != "READY" {
        panic!(
            "the example did not start: {first:?} {}",
            stderr_of(&mut child)
        );
    }
    let sent = packets();
    let datagrams = sent.len();
    let (from, to) = (pair.peer_ip, pair.host_ip);
    pair.in_ns(move || {
        let s = UdpSocket::bind((from, 0)).unwrap();
        for (k, p) in sent.iter().enumerate() {
            s.send_to(p, (to, PORT)).unwrap();
            if k % 32 == 31 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
    .unwrap();
    let mut lines = Vec::new();
    for line in stdout.lines() {
        lines.push(line.unwrap());
    }
    let status = child.wait().unwrap();
    let err = stderr_of(&mut child);
    assert!(status.success(), "{status}: {lines:?} {err}");
    let heaps: Vec<&String> = lines.iter().filter(|l| l.starts_with("HEAP ")).collect();
    // The data heaps, then the stop heap (delivered, then EOS).
    for (cnt, line) in (1..=HEAPS).zip(&heaps) {
        assert_eq!(
            line.as_str(),
            format!("HEAP {cnt} complete=1 5632:imm 4096:{ITEM}"),
            "{lines:?}"
        );
    }
    assert!(heaps.len() as u64 >= HEAPS, "{lines:?} {err}");
    let stats = lines
        .iter()
        .find(|l| l.starts_with("STATS "))
        .expect("a STATS line");
    assert!(
        stats.contains(&format!(" datagrams={datagrams} "))
            && stats.contains(&format!(" packets-copied={datagrams} "))
            && stats.contains(" packets-landed=0 ")
            && stats.contains(" drops-kernel=0"),
        "{stats}"
    );
}
