//! What the benchmarks over a veth pair need beside the pair itself: the static
//! neighbour entry, DPDK's driver choice and where its plugin is.

use std::path::{Path, PathBuf};

use firehose_testkit::netns::VethPair;

use super::receiver::RecvConfig;

/// Which DPDK poll-mode driver `fhdpdksrc` uses on the veth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pmd {
    /// `net_af_xdp`: DPDK's own AF_XDP driver.
    #[value(name = "af_xdp")]
    AfXdp,
    /// `net_af_packet`: a PACKET_MMAP ring.
    #[value(name = "af_packet")]
    AfPacket,
}

impl Pmd {
    /// The `--vdev` device name DPDK gives the port.
    pub fn device(self) -> &'static str {
        match self {
            Pmd::AfXdp => "net_af_xdp0",
            Pmd::AfPacket => "net_af_packet0",
        }
    }

    /// The EAL arguments for this driver on `iface`.
    pub fn eal_args(self, iface: &str) -> String {
        match self {
            Pmd::AfXdp => format!("--no-huge --vdev={},iface={iface}", self.device()),
            // The default ring of 512 frames was measured to lose packets silently.
            Pmd::AfPacket => format!(
                "--no-huge --vdev={},iface={iface},framecnt=4096",
                self.device()
            ),
        }
    }

    /// Sets `cfg`'s DPDK options for the host end of `pair`.
    pub fn configure(self, cfg: &mut RecvConfig, pair: &VethPair) {
        cfg.eal_args = Some(self.eal_args(&pair.host_if));
        cfg.dpdk_port = Some(self.device().to_string());
    }
}

/// Creates the pair, with a static neighbour entry for the host end in the namespace:
/// a DPDK or AF_XDP receiver takes frames off the interface before the kernel could
/// answer ARP.
pub fn create_pair() -> Result<VethPair, String> {
    let pair = VethPair::create("b").map_err(|e| {
        format!(
            "cannot create the benchmark's network namespace and veth pair ({e}); run as \
             root, with iproute2 installed"
        )
    })?;
    pair.pin_host_neighbour()
        .map_err(|e| format!("static neighbour entry: {e}"))?;
    Ok(pair)
}

/// Where `libgstfirehosedpdk.so` is: `explicit`, or next to the running executable.
pub fn find_dpdk_plugin(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidate = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the firehose executable: {e}"))?
            .with_file_name("libgstfirehosedpdk.so"),
    };
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(format!(
            "{} not found; build it with `cargo build --release -p gstfirehosedpdk` \
             (needs libdpdk-dev) or pass --dpdk-plugin",
            candidate.display()
        ))
    }
}

/// A directory holding only a link to the DPDK plugin, for the receiver's
/// `GST_PLUGIN_PATH` (pointing it at the whole build directory would also load a second
/// copy of the main plugin, which `firehose` registers statically).
pub fn dpdk_plugin_dir(plugin: &Path) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("firehose-bench-dpdk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let plugin = plugin
        .canonicalize()
        .map_err(|e| format!("{}: {e}", plugin.display()))?;
    std::os::unix::fs::symlink(&plugin, dir.join("libgstfirehosedpdk.so"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eal_args_per_driver() {
        assert_eq!(
            Pmd::AfPacket.eal_args("v0"),
            "--no-huge --vdev=net_af_packet0,iface=v0,framecnt=4096"
        );
        assert_eq!(
            Pmd::AfXdp.eal_args("v0"),
            "--no-huge --vdev=net_af_xdp0,iface=v0"
        );
    }

    #[test]
    fn a_missing_dpdk_plugin_says_how_to_build_it() {
        let e =
            find_dpdk_plugin(Some(Path::new("/nonexistent/libgstfirehosedpdk.so"))).unwrap_err();
        assert!(
            e.contains("cargo build --release -p gstfirehosedpdk"),
            "{e}"
        );
    }
}
