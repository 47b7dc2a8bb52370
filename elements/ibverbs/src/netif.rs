//! The network side of the RDMA device: which interface, port and MAC belong to it
//! (from sysfs, so librdmacm is not needed). The multicast joins that make IGMP reports
//! still go out (the steered frames bypass the kernel) are `firehose_core::multicast`'s.
//!
//! spead2 finds the device by binding an `rdma_cm_id` to the interface's IP address;
//! the same mapping is in sysfs: `/sys/class/net/<if>/device/infiniband/<dev>`, and
//! back, `/sys/class/infiniband/<dev>/device/net/<if>`. The port is
//! `/sys/class/net/<if>/dev_port` + 1 (1 for single-port functions such as mlx5).

use std::path::Path;

use crate::probe::DeviceName;
use firehose_core::frame::build::parse_mac;

/// The sysfs mount point.
pub const SYSFS: &str = "/sys";

/// The device, interface and port one `fhibvsrc` receives on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// RDMA device (e.g. `mlx5_0`).
    pub device: String,
    /// Its network interface (e.g. `ens1f0np0`).
    pub interface: String,
    /// Port number on the device (1-based).
    pub port: u8,
    /// The interface's MAC (the unicast steering rule matches it).
    pub mac: [u8; 6],
}

/// Sorted entry names of a directory (empty if it cannot be read).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Works out the device, interface, port and MAC from the `interface` and `device`
/// settings (either, both or neither) and the probed `devices`, reading sysfs under
/// `sysfs` ([`SYSFS`] in production). Errors say what is wrong and how to fix it.
pub fn resolve(
    sysfs: &Path,
    devices: &[DeviceName],
    interface: Option<&str>,
    device: Option<&str>,
) -> Result<Target, String> {
    let known = |d: &str| devices.iter().any(|x| x.0 == d);
    let (device, interface) = match interface {
        Some(ifname) => {
            let netdir = sysfs.join("class/net").join(ifname);
            if !netdir.exists() {
                return Err(format!(
                    "no network interface {ifname:?}; set `interface` to one listed by `ip link`"
                ));
            }
            let own = entries(&netdir.join("device/infiniband"));
            let dev = match device {
                Some(d) if own.is_empty() || own.iter().any(|o| o == d) => d.to_string(),
                Some(d) => {
                    return Err(format!(
                        "interface {ifname} belongs to RDMA device {}, not {d}; leave `device` empty or match them",
                        own.join(", ")
                    ))
                }
                None => own.into_iter().find(|o| known(o)).ok_or_else(|| {
                    format!(
                        "interface {ifname} has no RDMA device (not an RDMA NIC, or its RDMA driver is not loaded: e.g. modprobe mlx5_ib; rdma link shows the mapping)"
                    )
                })?,
            };
            (dev, ifname.to_string())
        }
        None => {
            let dev = crate::probe::select(devices, device)?.0;
            let nets = entries(&sysfs.join("class/infiniband").join(&dev).join("device/net"));
            let ifname = nets.into_iter().next().ok_or_else(|| {
                format!("RDMA device {dev} has no network interface in sysfs; set `interface`")
            })?;
            (dev, ifname)
        }
    };
    if !known(&device) {
        return Err(format!(
            "no RDMA device named {device:?} (see ibv_devices); available: {}",
            devices
                .iter()
                .map(|d| d.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let netdir = sysfs.join("class/net").join(&interface);
    let port = std::fs::read_to_string(netdir.join("dev_port"))
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok())
        .map_or(1, |p| p.saturating_add(1));
    let mac = std::fs::read_to_string(netdir.join("address"))
        .ok()
        .and_then(|s| parse_mac(&s))
        .ok_or_else(|| {
            format!(
                "cannot read the MAC of interface {interface} (/sys/class/net/{interface}/address)"
            )
        })?;
    Ok(Target {
        device,
        interface,
        port,
        mac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake sysfs tree, removed on drop.
    struct FakeSys(PathBuf);

    impl FakeSys {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("fhibv-sysfs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
        fn nic(&self, ifname: &str, dev: &str, dev_port: u8, mac: &str) {
            let n = self.0.join("class/net").join(ifname);
            std::fs::create_dir_all(n.join("device/infiniband").join(dev)).unwrap();
            std::fs::write(n.join("dev_port"), format!("{dev_port}\n")).unwrap();
            std::fs::write(n.join("address"), format!("{mac}\n")).unwrap();
            let i = self.0.join("class/infiniband").join(dev).join("device/net");
            std::fs::create_dir_all(i.join(ifname)).unwrap();
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn devs(names: &[&str]) -> Vec<DeviceName> {
        names.iter().map(|n| DeviceName(n.to_string())).collect()
    }

    #[test]
    fn interface_to_device_and_back() {
        let sys = FakeSys::new("map");
        sys.nic("ens1f0", "mlx5_0", 0, "0c:42:a1:00:00:01");
        sys.nic("ens1f1", "mlx5_1", 0, "0c:42:a1:00:00:02");
        std::fs::create_dir_all(sys.0.join("class/net/eth0")).unwrap();
        let d = devs(&["mlx5_0", "mlx5_1"]);
        let t = resolve(&sys.0, &d, Some("ens1f1"), None).unwrap();
        assert_eq!(
            t,
            Target {
                device: "mlx5_1".into(),
                interface: "ens1f1".into(),
                port: 1,
                mac: [0x0c, 0x42, 0xa1, 0, 0, 2]
            }
        );
        let t = resolve(&sys.0, &d, None, Some("mlx5_0")).unwrap();
        assert_eq!((t.interface.as_str(), t.port), ("ens1f0", 1));
        let t = resolve(&sys.0, &d, None, None).unwrap();
        assert_eq!(t.device, "mlx5_0");

        let e = resolve(&sys.0, &d, Some("ens1f0"), Some("mlx5_1")).unwrap_err();
        assert!(e.contains("belongs to RDMA device mlx5_0"), "{e}");
        let e = resolve(&sys.0, &d, Some("eth0"), None).unwrap_err();
        assert!(
            e.contains("has no RDMA device") && e.contains("modprobe"),
            "{e}"
        );
        let e = resolve(&sys.0, &d, Some("nope0"), None).unwrap_err();
        assert!(e.contains("no network interface \"nope0\""), "{e}");
        let e = resolve(&sys.0, &devs(&["mlx5_0"]), Some("ens1f1"), Some("mlx5_1")).unwrap_err();
        assert!(e.contains("no RDMA device named \"mlx5_1\""), "{e}");
    }

    #[test]
    fn second_port_of_a_dual_port_function() {
        let sys = FakeSys::new("port");
        sys.nic("ib1", "mlx4_0", 1, "00:02:c9:00:00:09");
        let t = resolve(&sys.0, &devs(&["mlx4_0"]), Some("ib1"), None).unwrap();
        assert_eq!(t.port, 2);
    }
}
