//! Start-up failures are element errors that say the cause and the fix: a device that
//! cannot be added, an unknown port, EAL arguments that differ from the running EAL's,
//! a bad address. (Bad EAL arguments: `start_errors_eal.rs`, a process of its own.)

mod common;

use common::*;

#[test]
fn start_errors_say_cause_and_fix() {
    let _g = serial();
    let pair = veth("er");
    let eal = "--no-huge --no-pci";
    let e = start_error(&[
        (
            "eal-args",
            &format!("{eal} --vdev=net_af_packet0,iface=fhnosuchif0"),
        ),
        ("dpdk-port", "net_af_packet0"),
    ])
    .expect("no such interface");
    assert!(
        e.contains("could not add device 'net_af_packet0,iface=fhnosuchif0'"),
        "{e}"
    );
    assert!(e.contains("iface= names an existing interface"), "{e}");

    let e = start_error(&[("eal-args", eal), ("dpdk-port", "net_nosuch0")]).expect("fails");
    assert!(e.contains("No DPDK port 'net_nosuch0'"), "{e}");
    assert!(e.contains("--vdev="), "says how to add one: {e}");

    let e = start_error(&[("eal-args", "--no-huge -m 128"), ("dpdk-port", "0")])
        .expect("fails: the EAL is up with other arguments");
    assert!(e.contains("already running"), "{e}");

    let e = start_error(&[("eal-args", eal), ("address", "not-an-ip")]).expect("fails");
    assert!(e.contains("address 'not-an-ip'"), "{e}");

    // A good start still works after all of that, with the device named only by
    // --vdev (empty base arguments use the running EAL), and the failed device was
    // not left plugged.
    let ok = start_error(&[
        (
            "eal-args",
            &format!("--vdev=net_af_packet0,iface={},framecnt=4096", pair.host_if),
        ),
        ("dpdk-port", "net_af_packet0"),
    ]);
    assert_eq!(ok, None);
}
