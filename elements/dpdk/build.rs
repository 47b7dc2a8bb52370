//! Generates the project-owned DPDK bindings.
//!
//! bindgen reads `csrc/wrapper.h` against the system's libdpdk 22.11 (found with
//! pkg-config) and, with `wrap_static_fns`, writes a C file of non-static wrappers for the
//! `static inline` fast-path functions (`rte_eth_rx_burst`, `rte_pktmbuf_alloc_bulk`…),
//! which cannot be linked otherwise. That file and `csrc/helpers.c` are compiled with the
//! full `pkg-config --cflags libdpdk` (it carries `-include rte_config.h` and `-march`,
//! without which the inline functions and struct layouts differ) and linked with
//! `pkg-config --libs libdpdk`. The allowlist is narrow to keep bindgen and rustc fast.

use std::env;
use std::path::PathBuf;

const HINT: &str = "libdpdk 22.11 not found: apt install libdpdk-dev dpdk-dev libclang-dev \
                    (the DPDK crates are not default workspace members; build everything else \
                    with a plain `cargo build`)";

fn main() {
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/helpers.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = pkg_config::Config::new()
        .range_version("22.11".."22.12")
        .cargo_metadata(false)
        .probe("libdpdk")
        .unwrap_or_else(|e| panic!("{HINT}\n(pkg-config said: {e})"));
    let cflags = pkg_config_output(&["--cflags", "libdpdk"]);
    let cflags: Vec<String> = cflags.split_whitespace().map(str::to_owned).collect();

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("dpdk_static_fns");

    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .clang_args(&cflags)
        .allowlist_function(
            "rte_eal_init|rte_strerror|rte_dev_probe|rte_eal_hotplug_remove|\
             rte_eth_dev_get_port_by_name|rte_eth_dev_get_name_by_port|rte_eth_dev_is_valid_port|\
             rte_eth_dev_count_avail|rte_eth_dev_info_get|rte_eth_dev_configure|\
             rte_eth_dev_adjust_nb_rx_tx_desc|rte_eth_rx_queue_setup|rte_eth_tx_queue_setup|\
             rte_eth_dev_start|rte_eth_dev_stop|rte_eth_dev_close|rte_eth_promiscuous_enable|\
             rte_eth_dev_set_mc_addr_list|rte_eth_allmulticast_enable|\
             rte_eth_stats_get|rte_eth_link_get_nowait|rte_eth_macaddr_get|rte_eth_dev_socket_id|rte_eth_rx_burst|\
             rte_eth_tx_burst|rte_pktmbuf_pool_create|rte_mempool_free|rte_mempool_mem_iter|\
             rte_pktmbuf_free_bulk|rte_pktmbuf_alloc_bulk|rte_pktmbuf_free|rte_pktmbuf_alloc|\
             rte_mbuf_refcnt_read|rte_mempool_avail_count|rte_mempool_in_use_count|fh_.*",
        )
        .allowlist_var(
            "RTE_ETH_NAME_MAX_LEN|RTE_PKTMBUF_HEADROOM|SOCKET_ID_ANY|RTE_MEMPOOL_F_NO_IOVA_CONTIG",
        )
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_.*")
        .layout_tests(false)
        .derive_default(true)
        .generate_comments(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen on the libdpdk headers failed: {e}\n{HINT}"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut build = cc::Build::new();
    build
        .file(wrappers.with_extension("c"))
        .file("csrc/helpers.c")
        .include("csrc")
        .include(env::current_dir().expect("cwd"))
        .warnings(false)
        // A missing prototype would silently truncate a returned pointer to an int.
        .flag("-Werror=implicit-function-declaration")
        .flag("-Werror=int-conversion");
    for f in &cflags {
        build.flag(f);
    }
    build.compile("firehose_dpdk_wrappers");

    // Link the DPDK libraries after the wrappers that use them.
    for p in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", p.display());
    }
    for l in &lib.libs {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}

/// `pkg-config args…` as a string: the `pkg_config` crate splits `-include rte_config.h`
/// into a define-less pair it does not return, so ask for the raw flags.
fn pkg_config_output(args: &[&str]) -> String {
    let out = std::process::Command::new("pkg-config")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run pkg-config ({e}): apt install pkg-config\n{HINT}"));
    if !out.status.success() {
        panic!(
            "{HINT}\n(pkg-config said: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config prints UTF-8")
}
