//! The hand-written layouts in `firehose_ibverbs::sys` against the real header: this
//! test generates a C program that prints `sizeof`, `_Alignof` and `offsetof` of every
//! struct and field the crate defines, and every constant it uses, compiles it with the
//! system C compiler against `/usr/include/infiniband/verbs.h`, runs it, and compares
//! each number with `size_of` / `align_of` / `offset_of!`. It also builds the
//! flow-steering rule in C exactly as spead2's `create_flow` does and compares the bytes
//! with `flow::flow_rule`.
//!
//! Needs a C compiler (`cc`, or `$CC`) and rdma-core's headers (`libibverbs-dev`) at
//! test time only; without them the test fails and says so.

use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

use firehose_ibverbs::flow::{flow_rule, FlowRule};
use firehose_ibverbs::sys;

/// `("C expression", Rust value)` pairs.
type Checks = Vec<(String, u64)>;

macro_rules! size {
    ($c:expr, $ty:ty) => {
        (
            format!("sizeof({})", $c),
            size_of::<$ty>() as u64,
            format!("_Alignof({})", $c),
            align_of::<$ty>() as u64,
        )
    };
}

/// Offsets of fields whose Rust and C names agree (`$f` may be a nested path).
macro_rules! offs {
    ($checks:ident, $s:ident: $($($f:ident).+),+ $(,)?) => {
        $(
            $checks.push((
                format!("offsetof(struct {}, {})", stringify!($s), stringify!($($f).+).replace(' ', "")),
                offset_of!(sys::$s, $($f).+) as u64,
            ));
        )+
    };
}

/// The offset of Rust field `$f`, called `$c` in C.
macro_rules! off_as {
    ($checks:ident, $s:ident, $f:ident, $c:literal) => {
        $checks.push((
            format!("offsetof(struct {}, {})", stringify!($s), $c),
            offset_of!(sys::$s, $f) as u64,
        ));
    };
}

fn checks() -> Checks {
    let mut c: Checks = vec![];
    let mut sized = |v: (String, u64, String, u64)| {
        c.push((v.0, v.1));
        c.push((v.2, v.3));
    };
    sized(size!("struct ibv_context_ops", sys::ibv_context_ops));
    sized(size!("struct ibv_context", sys::ibv_context));
    sized(size!("struct verbs_context", sys::verbs_context));
    sized(size!("struct ibv_cq", sys::ibv_cq));
    sized(size!("struct ibv_qp", sys::ibv_qp));
    sized(size!("struct ibv_mr", sys::ibv_mr));
    sized(size!("struct ibv_flow", sys::ibv_flow));
    sized(size!("struct ibv_sge", sys::ibv_sge));
    sized(size!("struct ibv_recv_wr", sys::ibv_recv_wr));
    sized(size!("struct ibv_wc", sys::ibv_wc));
    sized(size!("struct ibv_qp_cap", sys::ibv_qp_cap));
    sized(size!("struct ibv_qp_init_attr", sys::ibv_qp_init_attr));
    sized(size!("union ibv_gid", sys::ibv_gid));
    sized(size!("struct ibv_global_route", sys::ibv_global_route));
    sized(size!("struct ibv_ah_attr", sys::ibv_ah_attr));
    sized(size!("struct ibv_qp_attr", sys::ibv_qp_attr));
    sized(size!("struct ibv_flow_attr", sys::ibv_flow_attr));
    sized(size!(
        "struct ibv_flow_eth_filter",
        sys::ibv_flow_eth_filter
    ));
    sized(size!("struct ibv_flow_spec_eth", sys::ibv_flow_spec_eth));
    sized(size!(
        "struct ibv_flow_ipv4_filter",
        sys::ibv_flow_ipv4_filter
    ));
    sized(size!("struct ibv_flow_spec_ipv4", sys::ibv_flow_spec_ipv4));
    sized(size!(
        "struct ibv_flow_tcp_udp_filter",
        sys::ibv_flow_tcp_udp_filter
    ));
    sized(size!(
        "struct ibv_flow_spec_tcp_udp",
        sys::ibv_flow_spec_tcp_udp
    ));
    sized(size!("struct fh_spead2_rule", FlowRule));
    // Enum-typed fields are `u32` in Rust: C enums must be 4 bytes.
    for e in [
        "enum ibv_qp_type",
        "enum ibv_qp_state",
        "enum ibv_wc_status",
        "enum ibv_wc_opcode",
        "enum ibv_flow_attr_type",
        "enum ibv_flow_spec_type",
        "enum ibv_mtu",
        "enum ibv_mig_state",
    ] {
        c.push((format!("sizeof({e})"), 4));
    }

    offs!(c, ibv_context_ops: poll_cq, post_recv);
    offs!(c, ibv_context: device, ops, ops.poll_cq, ops.post_recv, cmd_fd, async_fd,
        num_comp_vectors, mutex, abi_compat);
    offs!(c, verbs_context: ibv_destroy_flow, ibv_create_flow, sz, context,
        context.ops.post_recv, context.abi_compat);
    offs!(c, ibv_cq: context, channel, cq_context, handle, cqe, mutex, cond,
        comp_events_completed, async_events_completed);
    offs!(c, ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state,
        qp_type, mutex, cond, events_completed);
    offs!(c, ibv_mr: context, pd, addr, length, handle, lkey, rkey);
    offs!(c, ibv_flow: comp_mask, context, handle);
    offs!(c, ibv_sge: addr, length, lkey);
    offs!(c, ibv_recv_wr: wr_id, next, sg_list, num_sge);
    offs!(c, ibv_wc: wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp,
        wc_flags, pkey_index, slid, sl, dlid_path_bits);
    offs!(c, ibv_qp_cap: max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
        max_inline_data);
    offs!(c, ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all);
    offs!(c, ibv_global_route: dgid, flow_label, sgid_index, hop_limit, traffic_class);
    offs!(c, ibv_ah_attr: grh, dlid, sl, src_path_bits, static_rate, is_global, port_num);
    offs!(c, ibv_qp_attr: qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
        sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
        alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
        min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout,
        rate_limit);
    offs!(c, ibv_flow_attr: comp_mask, size, priority, num_of_specs, port, flags);
    off_as!(c, ibv_flow_attr, type_, "type");
    offs!(c, ibv_flow_eth_filter: dst_mac, src_mac, ether_type, vlan_tag);
    offs!(c, ibv_flow_spec_eth: size, val, mask);
    off_as!(c, ibv_flow_spec_eth, type_, "type");
    offs!(c, ibv_flow_ipv4_filter: src_ip, dst_ip);
    offs!(c, ibv_flow_spec_ipv4: size, val, mask);
    off_as!(c, ibv_flow_spec_ipv4, type_, "type");
    offs!(c, ibv_flow_tcp_udp_filter: dst_port, src_port);
    offs!(c, ibv_flow_spec_tcp_udp: size, val, mask);
    off_as!(c, ibv_flow_spec_tcp_udp, type_, "type");
    c.push((
        "offsetof(struct fh_spead2_rule, eth)".into(),
        offset_of!(FlowRule, eth) as u64,
    ));
    c.push((
        "offsetof(struct fh_spead2_rule, ip)".into(),
        offset_of!(FlowRule, ip) as u64,
    ));
    c.push((
        "offsetof(struct fh_spead2_rule, udp)".into(),
        offset_of!(FlowRule, udp) as u64,
    ));

    for (name, v) in [
        ("IBV_QPT_RAW_PACKET", u64::from(sys::IBV_QPT_RAW_PACKET)),
        ("IBV_QPS_RESET", u64::from(sys::IBV_QPS_RESET)),
        ("IBV_QPS_INIT", u64::from(sys::IBV_QPS_INIT)),
        ("IBV_QPS_RTR", u64::from(sys::IBV_QPS_RTR)),
        ("IBV_QP_STATE", sys::IBV_QP_STATE as u64),
        ("IBV_QP_PORT", sys::IBV_QP_PORT as u64),
        ("IBV_ACCESS_LOCAL_WRITE", sys::IBV_ACCESS_LOCAL_WRITE as u64),
        ("IBV_WC_SUCCESS", u64::from(sys::IBV_WC_SUCCESS)),
        ("IBV_WC_LOC_LEN_ERR", u64::from(sys::IBV_WC_LOC_LEN_ERR)),
        ("IBV_FLOW_ATTR_NORMAL", u64::from(sys::IBV_FLOW_ATTR_NORMAL)),
        ("IBV_FLOW_SPEC_ETH", u64::from(sys::IBV_FLOW_SPEC_ETH)),
        ("IBV_FLOW_SPEC_IPV4", u64::from(sys::IBV_FLOW_SPEC_IPV4)),
        ("IBV_FLOW_SPEC_UDP", u64::from(sys::IBV_FLOW_SPEC_UDP)),
        (
            "(uintptr_t)__VERBS_ABI_IS_EXTENDED",
            sys::VERBS_ABI_IS_EXTENDED as usize as u64,
        ),
    ] {
        c.push((name.into(), v));
    }
    c
}

/// Endpoints whose rules are built both in C (spead2's way) and in Rust.
const ENDPOINTS: [(&str, [u8; 4], u16, u8); 3] = [
    ("multicast", [239, 10, 11, 12], 7148, 1),
    ("unicast", [10, 0, 0, 5], 9000, 2),
    ("any", [0, 0, 0, 0], 7148, 1),
];
const IF_MAC: [u8; 6] = [0x0c, 0x42, 0xa1, 0xde, 0xad, 0x0f];

/// C code for the rule, following spead2's `create_flow` (src/common_ibv.cpp): the
/// same anonymous struct with packed members, memset, the same assignments.
const C_RULE: &str = r#"
struct fh_spead2_rule {
    struct ibv_flow_attr attr;
    struct ibv_flow_spec_eth eth __attribute__((packed));
    struct ibv_flow_spec_ipv4 ip __attribute__((packed));
    struct ibv_flow_spec_tcp_udp udp __attribute__((packed));
};

static void rule(const char *name, const uint8_t ip[4], uint16_t port, const uint8_t if_mac[6], int ib_port)
{
    struct fh_spead2_rule flow_rule;
    memset(&flow_rule, 0, sizeof(flow_rule));
    flow_rule.attr.type = IBV_FLOW_ATTR_NORMAL;
    flow_rule.attr.priority = 0;
    flow_rule.attr.size = sizeof(flow_rule);
    flow_rule.attr.num_of_specs = 3;
    flow_rule.attr.port = ib_port;
    flow_rule.eth.type = IBV_FLOW_SPEC_ETH;
    flow_rule.eth.size = sizeof(flow_rule.eth);
    flow_rule.ip.type = IBV_FLOW_SPEC_IPV4;
    flow_rule.ip.size = sizeof(flow_rule.ip);
    int unspecified = !(ip[0] | ip[1] | ip[2] | ip[3]);
    if (!unspecified) {
        uint8_t dst_mac[6];
        if (ip[0] >= 224 && ip[0] <= 239) {
            uint8_t m[6] = {0x01, 0x00, 0x5e, (uint8_t)(ip[1] & 0x7f), ip[2], ip[3]};
            memcpy(dst_mac, m, 6);
        } else {
            memcpy(dst_mac, if_mac, 6);
        }
        memcpy(&flow_rule.eth.val.dst_mac, dst_mac, sizeof(dst_mac));
        memset(&flow_rule.eth.mask.dst_mac, 0xFF, sizeof(flow_rule.eth.mask.dst_mac));
        memcpy(&flow_rule.ip.val.dst_ip, ip, 4);
        memset(&flow_rule.ip.mask.dst_ip, 0xFF, sizeof(flow_rule.ip.mask.dst_ip));
    }
    flow_rule.udp.type = IBV_FLOW_SPEC_UDP;
    flow_rule.udp.size = sizeof(flow_rule.udp);
    flow_rule.udp.val.dst_port = htobe16(port);
    flow_rule.udp.mask.dst_port = 0xFFFF;
    printf("rule %s=", name);
    const uint8_t *b = (const uint8_t *)&flow_rule;
    for (size_t i = 0; i < sizeof(flow_rule); i++)
        printf("%02x", b[i]);
    printf("\n");
}
"#;

fn c_program(checks: &Checks) -> String {
    let mut p = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n\
         #include <endian.h>\n#include <infiniband/verbs.h>\n",
    );
    p.push_str(C_RULE);
    p.push_str("int main(void) {\n");
    for (expr, _) in checks {
        writeln!(
            p,
            "    printf(\"%s=%llu\\n\", \"{expr}\", (unsigned long long)({expr}));"
        )
        .unwrap();
    }
    let mac = IF_MAC.map(|b| b.to_string()).join(",");
    writeln!(p, "    const uint8_t if_mac[6] = {{{mac}}};").unwrap();
    for (name, ip, port, ib_port) in ENDPOINTS {
        let ip = ip.map(|b| b.to_string()).join(",");
        writeln!(
            p,
            "    {{ const uint8_t ip[4] = {{{ip}}}; rule(\"{name}\", ip, {port}, if_mac, {ib_port}); }}"
        )
        .unwrap();
    }
    p.push_str("    return 0;\n}\n");
    p
}

#[test]
fn rust_layouts_match_verbs_h() {
    let header = PathBuf::from("/usr/include/infiniband/verbs.h");
    assert!(
        header.exists(),
        "{} is missing: install rdma-core's headers (apt install libibverbs-dev) to run the layout test",
        header.display()
    );
    let checks = checks();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ibverbs-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program(&checks)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?}: {e} (install gcc)"));
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let got: std::collections::HashMap<&str, &str> =
        text.lines().filter_map(|l| l.split_once('=')).collect();

    let mut wrong = vec![];
    for (expr, rust) in &checks {
        let c: u64 = got
            .get(expr.as_str())
            .unwrap_or_else(|| panic!("{expr} not printed"))
            .parse()
            .unwrap();
        if c != *rust {
            wrong.push(format!("{expr}: C {c}, Rust {rust}"));
        }
    }
    assert!(wrong.is_empty(), "layout mismatches:\n{}", wrong.join("\n"));
    eprintln!(
        "{} sizes, alignments, offsets and constants agree",
        checks.len()
    );

    for (name, ip, port, ib_port) in ENDPOINTS {
        let c_hex = got[format!("rule {name}").as_str()];
        let r = flow_rule(Ipv4Addr::from(ip), port, IF_MAC, ib_port);
        let rust_hex: String = r.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            rust_hex, c_hex,
            "flow rule for {name} differs from spead2's"
        );
    }
}
