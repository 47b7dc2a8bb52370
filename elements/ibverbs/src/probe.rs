//! Is there an RDMA device? The decision is a pure function ([`decide`]) over what
//! loading libibverbs and listing devices returned ([`RawOutcome`]), so every case —
//! library missing, kernel without RDMA (ENOSYS), no device — is tested without
//! hardware; [`probe`] feeds it the real outcome.

use std::fmt;

/// The name of an RDMA device as libibverbs reports it (e.g. `mlx5_0`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceName(pub String);

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub use crate::verbs::RawOutcome;

/// Why RDMA cannot be used here. `Display` gives the cause and the fix, and always
/// starts with "no RDMA device".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RdmaUnavailable {
    /// libibverbs could not be loaded.
    LibraryMissing {
        /// What the loader said.
        detail: String,
    },
    /// The kernel has no RDMA (verbs) support: `ibv_get_device_list` failed with ENOSYS.
    NoKernelSupport,
    /// libibverbs loaded and listed no device.
    NoDevice,
    /// `ibv_get_device_list` failed for another reason.
    ListFailed {
        /// `errno` after the call.
        errno: i32,
    },
}

impl fmt::Display for RdmaUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LibraryMissing { detail } => write!(
                f,
                "no RDMA device: libibverbs could not be loaded ({detail}); install rdma-core's \
                 user-space verbs: apt install rdma-core ibverbs-providers (libibverbs1)"
            ),
            Self::NoKernelSupport => write!(
                f,
                "no RDMA device: ibv_get_device_list failed with ENOSYS, this kernel has no \
                 RDMA (InfiniBand verbs) support; run on a kernel built with CONFIG_INFINIBAND \
                 and load the NIC's RDMA driver (e.g. modprobe mlx5_ib), or use fhudpsrc"
            ),
            Self::NoDevice => write!(
                f,
                "no RDMA device found (libibverbs loaded, 0 devices); load the NIC's RDMA \
                 driver (e.g. modprobe mlx5_ib) and check with ibv_devices, or use fhudpsrc"
            ),
            Self::ListFailed { errno } => write!(
                f,
                "no RDMA device: ibv_get_device_list failed: {} (errno {errno}); check \
                 ibv_devices and the permissions on /dev/infiniband",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for RdmaUnavailable {}

/// Judges a raw outcome: the devices, or why there are none.
pub fn decide(raw: RawOutcome) -> Result<Vec<DeviceName>, RdmaUnavailable> {
    match raw {
        RawOutcome::LibraryMissing { library, detail } => Err(RdmaUnavailable::LibraryMissing {
            detail: format!("{library}: {detail}"),
        }),
        RawOutcome::ListFailed { errno } if errno == libc::ENOSYS => {
            Err(RdmaUnavailable::NoKernelSupport)
        }
        RawOutcome::ListFailed { errno } => Err(RdmaUnavailable::ListFailed { errno }),
        RawOutcome::Listed(names) if names.is_empty() => Err(RdmaUnavailable::NoDevice),
        RawOutcome::Listed(names) => Ok(names.into_iter().map(DeviceName).collect()),
    }
}

/// Loads libibverbs (once per process) and lists the RDMA devices.
pub fn probe() -> Result<Vec<DeviceName>, RdmaUnavailable> {
    decide(crate::verbs::raw_probe())
}

/// Picks the device named `wanted`, or the first one when `wanted` is `None`.
pub fn select(devices: &[DeviceName], wanted: Option<&str>) -> Result<DeviceName, String> {
    match wanted {
        None => devices
            .first()
            .cloned()
            .ok_or_else(|| RdmaUnavailable::NoDevice.to_string()),
        Some(w) => devices.iter().find(|d| d.0 == w).cloned().ok_or_else(|| {
            let have: Vec<&str> = devices.iter().map(|d| d.0.as_str()).collect();
            format!(
                "no RDMA device named {w:?}; available: {} (see ibv_devices)",
                have.join(", ")
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs;

    #[test]
    fn enosys_means_no_kernel_support() {
        let e = decide(RawOutcome::ListFailed {
            errno: libc::ENOSYS,
        })
        .unwrap_err();
        assert_eq!(e, RdmaUnavailable::NoKernelSupport);
        let m = e.to_string();
        assert!(m.starts_with("no RDMA device"), "{m}");
        assert!(m.contains("ENOSYS") && m.contains("kernel"), "{m}");
    }

    #[test]
    fn empty_list_means_no_device() {
        let e = decide(RawOutcome::Listed(vec![])).unwrap_err();
        assert_eq!(e, RdmaUnavailable::NoDevice);
        assert!(e
            .to_string()
            .starts_with("no RDMA device found (libibverbs loaded, 0 devices)"));
    }

    #[test]
    fn missing_library_names_the_package() {
        let e = decide(RawOutcome::LibraryMissing {
            library: "libibverbs.so.1".into(),
            detail: "cannot open shared object file".into(),
        })
        .unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, RdmaUnavailable::LibraryMissing { .. }));
        assert!(m.starts_with("no RDMA device"), "{m}");
        assert!(m.contains("apt install rdma-core ibverbs-providers"), "{m}");
        assert!(m.contains("cannot open shared object file"), "{m}");
    }

    #[test]
    fn other_errno_is_reported_not_mistaken_for_enosys() {
        let e = decide(RawOutcome::ListFailed {
            errno: libc::EACCES,
        })
        .unwrap_err();
        assert_eq!(
            e,
            RdmaUnavailable::ListFailed {
                errno: libc::EACCES
            }
        );
        assert!(e.to_string().contains("errno 13"), "{e}");
    }

    #[test]
    fn devices_are_listed_and_selected() {
        let d = decide(RawOutcome::Listed(vec!["mlx5_0".into(), "mlx5_1".into()])).unwrap();
        assert_eq!(
            d,
            vec![DeviceName("mlx5_0".into()), DeviceName("mlx5_1".into())]
        );
        assert_eq!(select(&d, None).unwrap().0, "mlx5_0");
        assert_eq!(select(&d, Some("mlx5_1")).unwrap().0, "mlx5_1");
        let e = select(&d, Some("mlx4_0")).unwrap_err();
        assert!(e.contains("mlx4_0") && e.contains("mlx5_0, mlx5_1"), "{e}");
        assert!(select(&[], None).is_err());
    }

    /// The real loader on a library name that cannot exist: the missing-library path as
    /// it runs on a machine without rdma-core.
    #[test]
    fn real_dlopen_failure_is_library_missing() {
        let raw = verbs::raw_probe_with(c"libibverbs-firehose-test-absent.so.1");
        assert!(matches!(raw, RawOutcome::LibraryMissing { .. }), "{raw:?}");
        assert!(matches!(
            decide(raw),
            Err(RdmaUnavailable::LibraryMissing { .. })
        ));
    }

    /// The real probe on this machine. Whatever the machine has, the outcome must be
    /// one of the judged cases, and a failure must read "no RDMA device".
    #[test]
    fn real_probe_is_consistent() {
        match probe() {
            Ok(devices) => assert!(!devices.is_empty()),
            Err(e) => assert!(e.to_string().starts_with("no RDMA device"), "{e}"),
        }
    }
}
