//! The XDP program `fhxdpsrc` loads: redirect UDP to the chosen endpoints (destination
//! address and port; any address, or several ports, as set) into the AF_XDP socket of
//! the receiving queue, pass everything else to the kernel, so ARP, ICMP, SSH and other
//! UDP keep working.
//!
//! Generated with the [`crate::bpf`] assembler at start, with the endpoints as
//! immediates, one comparison block each (at most 256: about 2600 instructions for
//! IPv6, well inside the verifier's limits), so the program needs no map lookups
//! besides the XSKMAP. Frames it does
//! not fully understand (VLAN tags, IPv4 fragments, IPv6 extension headers, short
//! frames) go to the kernel, never to the socket.

use std::net::IpAddr;

use firehose_core::endpoint::Endpoint;

use crate::bpf::{Alu, Asm, AsmError, Cond, Insn, Size, R0, R1, R2, R3, R4, R5, R6, R7};
use crate::sys::HELPER_REDIRECT_MAP;

/// `struct xdp_md` field offsets.
const MD_DATA: i16 = 0;
const MD_DATA_END: i16 = 4;
const MD_RX_QUEUE_INDEX: i16 = 16;

const ETH_HLEN: i32 = 14;
const UDP_HLEN: i32 = 8;
const IPPROTO_UDP: i32 = 17;

/// A 16-bit network-order field as a native-endian load sees it (the program is
/// generated on the machine that runs it).
pub fn ne16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// Four network-order bytes as a native-endian 32-bit load sees them.
fn ne32(b: [u8; 4]) -> i32 {
    u32::from_ne_bytes(b) as i32
}

/// One endpoint the program redirects: UDP to `port` at `address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Destination address; `None` for any, of either family.
    pub address: Option<IpAddr>,
    /// UDP destination port; 0 for any (only with an address: the element refuses
    /// port 0, see [`crate::engine::check_endpoints`]).
    pub port: u16,
}

/// Which datagrams the program redirects: those to any of its rules, each checked in
/// full (address and port), so that a datagram to a listed port but another address
/// still reaches the kernel and whoever listens there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// The endpoints (at least one).
    pub rules: Vec<Rule>,
}

impl Match {
    /// `address` (`None`: any) on each of `ports`.
    pub fn ports(ports: &[u16], address: Option<IpAddr>) -> Self {
        Self {
            rules: ports.iter().map(|&port| Rule { address, port }).collect(),
        }
    }

    /// The endpoints of `list` (an unspecified address is any address).
    pub fn endpoints(list: &[Endpoint]) -> Self {
        Self {
            rules: list
                .iter()
                .map(|e| Rule {
                    address: (!e.addr.is_unspecified()).then_some(e.addr),
                    port: e.port,
                })
                .collect(),
        }
    }
}

/// Why no program could be generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgError {
    /// No endpoint to match.
    NoPorts,
    /// The assembler refused (a bug here).
    Asm(AsmError),
}

impl std::fmt::Display for ProgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPorts => write!(f, "no UDP port to redirect"),
            Self::Asm(e) => write!(f, "XDP program assembly failed: {e}"),
        }
    }
}

impl std::error::Error for ProgError {}

/// Offset of the IPv4 destination address in an Ethernet frame.
const IPV4_DST: i16 = 14 + 16;
/// Offset of the IPv6 destination address in an Ethernet frame.
const IPV6_DST: i16 = 14 + 24;

/// A rule for any address, the same on both paths: its port (r5) or nothing decides.
/// Returns `None` when that was the whole rule, else the rule's port as the program
/// compares it (`None`: any port) for the address comparisons.
fn match_any_address(a: &mut Asm, r: &Rule) -> Option<Option<i32>> {
    let port = (r.port != 0).then(|| ne16(r.port));
    if r.address.is_some() {
        return Some(port);
    }
    match port {
        Some(p) => a.jmp_imm(Cond::Eq, R5, p, "redirect"),
        None => a.ja("redirect"),
    };
    None
}

/// The comparisons of one rule on the IPv4 path: r5 holds the destination port (as
/// loaded), r7 the destination address.
fn match_v4(a: &mut Asm, r: &Rule) {
    let Some(port) = match_any_address(a, r) else {
        return;
    };
    if let Some(IpAddr::V4(addr)) = r.address {
        if let Some(p) = port {
            a.skip_imm(Cond::Ne, R5, p, 1);
        }
        a.jmp32_imm(Cond::Eq, R7, ne32(addr.octets()), "redirect");
    }
}

/// The comparisons of one rule on the IPv6 path: r5 holds the destination port, r2
/// points at the frame (bounds checked past the UDP header). The address is compared a
/// word at a time, loaded into r4, skipping to the next rule at the first difference.
fn match_v6(a: &mut Asm, r: &Rule) {
    let Some(port) = match_any_address(a, r) else {
        return;
    };
    let Some(IpAddr::V6(addr)) = r.address else {
        return;
    };
    // The block: [port check], then load + compare per word; 8 instructions after the
    // port check.
    if let Some(p) = port {
        a.skip_imm(Cond::Ne, R5, p, 8);
    }
    let o = addr.octets();
    for k in 0..4 {
        let w: [u8; 4] = o[4 * k..4 * k + 4].try_into().expect("4 bytes");
        a.push(Insn::load(Size::W, R4, R2, IPV6_DST + 4 * k as i16));
        if k < 3 {
            // Past the rest of the block: 2 instructions per word left, less the final
            // jump's pair.
            a.skip32_imm(Cond::Ne, R4, ne32(w), 6 - 2 * k as i16);
        } else {
            a.jmp32_imm(Cond::Eq, R4, ne32(w), "redirect");
        }
    }
}

/// The program for `m`, redirecting to the XSKMAP `map_fd` at the packet's receive
/// queue. `fallback` is the verdict when that queue has no socket in the map: PASS in
/// production (nothing is lost while no socket listens), DROP in tests, so that a
/// match is observable without a socket.
pub fn redirect_program(m: &Match, map_fd: i32, fallback: u32) -> Result<Vec<Insn>, ProgError> {
    if m.rules.is_empty() {
        return Err(ProgError::NoPorts);
    }
    let v4 = m
        .rules
        .iter()
        .any(|r| !matches!(r.address, Some(IpAddr::V6(_))));
    let v6 = m
        .rules
        .iter()
        .any(|r| !matches!(r.address, Some(IpAddr::V4(_))));
    let v4_address = m
        .rules
        .iter()
        .any(|r| matches!(r.address, Some(IpAddr::V4(_))));
    let mut a = Asm::new();
    a.push(Insn::mov_reg(R6, R1))
        .push(Insn::load(Size::W, R2, R6, MD_DATA))
        .push(Insn::load(Size::W, R3, R6, MD_DATA_END))
        // Every load below is preceded by a bounds check against data_end, as the
        // verifier demands: r4 = data + bytes needed; if r4 > data_end, pass.
        .push(Insn::mov_reg(R4, R2))
        .push(Insn::alu_imm(Alu::Add, R4, ETH_HLEN))
        .jmp_reg(Cond::Gt, R4, R3, "pass")
        .push(Insn::load(Size::H, R5, R2, 12));
    if v4 {
        a.jmp_imm(Cond::Eq, R5, ne16(0x0800), "ipv4");
    }
    if v6 {
        a.jmp_imm(Cond::Eq, R5, ne16(0x86dd), "ipv6");
    }
    a.ja("pass");

    if v4 {
        a.label("ipv4")
            .push(Insn::mov_reg(R4, R2))
            .push(Insn::alu_imm(Alu::Add, R4, ETH_HLEN + 20))
            .jmp_reg(Cond::Gt, R4, R3, "pass")
            .push(Insn::load(Size::B, R5, R2, 14 + 9))
            .jmp_imm(Cond::Ne, R5, IPPROTO_UDP, "pass")
            // Fragments (MF set or an offset) go to the kernel, which reassembles.
            .push(Insn::load(Size::H, R5, R2, 14 + 6))
            .push(Insn::alu_imm(Alu::And, R5, ne16(0x3fff)))
            .jmp_imm(Cond::Ne, R5, 0, "pass");
        if v4_address {
            // Kept in r7 (no helper is called before the verdict, so it survives).
            a.push(Insn::load(Size::W, R7, R2, IPV4_DST));
        }
        // The UDP header follows the IHL-sized IPv4 header (options included).
        a.push(Insn::load(Size::B, R5, R2, 14))
            .push(Insn::alu_imm(Alu::And, R5, 0x0f))
            .push(Insn::alu_imm(Alu::Lsh, R5, 2))
            .jmp_imm(Cond::Lt, R5, 20, "pass")
            .push(Insn::alu_reg(Alu::Add, R2, R5))
            .push(Insn::mov_reg(R4, R2))
            .push(Insn::alu_imm(Alu::Add, R4, ETH_HLEN + UDP_HLEN))
            .jmp_reg(Cond::Gt, R4, R3, "pass")
            .push(Insn::load(Size::H, R5, R2, 14 + 2));
        for r in &m.rules {
            match_v4(&mut a, r);
        }
        a.ja("pass");
    }
    if v6 {
        a.label("ipv6")
            .push(Insn::mov_reg(R4, R2))
            .push(Insn::alu_imm(Alu::Add, R4, ETH_HLEN + 40 + UDP_HLEN))
            .jmp_reg(Cond::Gt, R4, R3, "pass")
            // Only UDP right after the fixed header; extension headers go to the kernel.
            .push(Insn::load(Size::B, R5, R2, 14 + 6))
            .jmp_imm(Cond::Ne, R5, IPPROTO_UDP, "pass")
            .push(Insn::load(Size::H, R5, R2, 14 + 40 + 2));
        for r in &m.rules {
            match_v6(&mut a, r);
        }
        a.ja("pass");
    }

    a.label("redirect")
        .push(Insn::load(Size::W, R2, R6, MD_RX_QUEUE_INDEX))
        .extend(Insn::load_map_fd(R1, map_fd))
        .push(Insn::mov_imm(R3, fallback as i32))
        .push(Insn::call(HELPER_REDIRECT_MAP))
        .push(Insn::exit())
        .label("pass")
        .push(Insn::mov_imm(R0, crate::sys::action::PASS as i32))
        .push(Insn::exit());
    a.finish().map_err(ProgError::Asm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rx::testframe::{arp, udp};
    use crate::sys::{self, action};

    /// The port comparisons in a program: `jeq r5, imm`.
    fn port_jumps(p: &[Insn]) -> Vec<i32> {
        p.iter()
            .filter(|i| i.code == 0x15 && i.regs == 0x05)
            .map(|i| i.imm)
            .collect()
    }

    fn any(ports: &[u16]) -> Match {
        Match::ports(ports, None)
    }

    fn at(address: &str, port: u16) -> Rule {
        Rule {
            address: Some(address.parse().unwrap()),
            port,
        }
    }

    #[test]
    fn one_port_program_shape() {
        let p = redirect_program(&any(&[7148]), 9, action::PASS).unwrap();
        let eth_types = [ne16(0x0800), ne16(0x86dd)];
        let jumps = port_jumps(&p);
        assert_eq!(jumps[..2], eth_types, "IPv4 then IPv6 dispatch");
        // The port, once on the IPv4 path and once on the IPv6 one.
        assert_eq!(jumps[2..], [ne16(7148), ne16(7148)]);
        // Ends: pass = r0 = XDP_PASS; exit.
        assert_eq!(p[p.len() - 2], Insn::mov_imm(R0, 2));
        assert_eq!(p[p.len() - 1], Insn::exit());
        let call = p.iter().position(|i| *i == Insn::call(51)).unwrap();
        assert_eq!(p[call - 1], Insn::mov_imm(R3, 2));
        assert_eq!(p[call - 3..call - 1], Insn::load_map_fd(R1, 9));
        assert_eq!(p[call - 4], Insn::load(Size::W, R2, R6, 16));
        // Every jump lands inside the program.
        for (k, i) in p.iter().enumerate() {
            let jump = matches!(i.code & 0x07, 0x05 | 0x06) && !matches!(i.code, 0x85 | 0x95);
            if jump {
                let t = k as i64 + 1 + i64::from(i.off);
                assert!((0..p.len() as i64).contains(&t), "insn {k} jumps to {t}");
            }
        }
    }

    #[test]
    fn several_ports_and_address_families() {
        let p = redirect_program(&any(&[5000, 5001, 7148]), 3, action::PASS).unwrap();
        let ports = [ne16(5000), ne16(5001), ne16(7148)];
        assert_eq!(port_jumps(&p)[2..], [ports, ports].concat());
        let v4 = Match::ports(&[7148], Some("10.1.2.3".parse().unwrap()));
        let p4 = redirect_program(&v4, 3, action::PASS).unwrap();
        assert_eq!(port_jumps(&p4), [ne16(0x0800)], "no IPv6 path");
        let addr = u32::from_ne_bytes([10, 1, 2, 3]) as i32;
        // jne r5, port, +1; jeq32 r7, address, redirect.
        let k = p4
            .iter()
            .position(|i| i.code == 0x16 && i.imm == addr)
            .unwrap();
        assert_eq!(
            (p4[k - 1].code, p4[k - 1].imm, p4[k - 1].off),
            (0x55, ne16(7148), 1)
        );
        let v6 = Match::ports(&[7148], Some("ff02::1:2".parse().unwrap()));
        let p6 = redirect_program(&v6, 3, action::PASS).unwrap();
        assert_eq!(port_jumps(&p6), [ne16(0x86dd)], "no IPv4 path");
        // Three words skip on a difference, the last jumps on equality.
        assert_eq!(p6.iter().filter(|i| i.code == 0x56).count(), 3);
        assert_eq!(p6.iter().filter(|i| i.code == 0x16).count(), 1);
        assert_eq!(
            redirect_program(&any(&[]), 3, action::PASS),
            Err(ProgError::NoPorts)
        );
    }

    /// The generated program, loaded into this kernel (the verifier must accept it) and
    /// run on hand-made frames with `BPF_PROG_TEST_RUN`. With an empty XSKMAP a match
    /// returns the fallback verdict, DROP here, and anything else PASS. Needs root.
    ///
    /// Both forms are checked: the plain program and the multi-buffer one (jumbo
    /// frames), which must give the same verdicts.
    fn verdicts(m: &Match, frames: &[(&str, Vec<u8>, u32)]) {
        let map = sys::create_xskmap(4).expect("BPF_MAP_CREATE (run the tests as root)");
        let insns =
            redirect_program(m, std::os::fd::AsRawFd::as_raw_fd(&map), action::DROP).unwrap();
        for frags in [false, true] {
            let prog = sys::load_xdp(&insns, "fh_xdp_test", frags)
                .unwrap_or_else(|e| panic!("verifier refused: {}\n{}", e.error, e.log));
            for (what, frame, want) in frames {
                let got = sys::test_run(&prog, frame).unwrap();
                assert_eq!(got, *want, "{what} (frags {frags})");
            }
        }
    }

    #[test]
    fn kernel_runs_the_program_and_matches_only_our_datagrams() {
        let (s4, s6) = ("10.0.0.1:999", "[fe80::1]:999");
        let f = |s: &str, d: &str, opts| udp(s.parse().unwrap(), d.parse().unwrap(), b"abc", opts);
        let mut frag = f(s4, "10.0.0.2:7148", 0);
        frag[20] = 0x20; // MF
        let mut ext = f(s6, "[fe80::2]:7148", 0);
        ext[20] = 0; // hop-by-hop header first
        let short = f(s4, "10.0.0.2:7148", 0)[..40].to_vec();
        let (hit, pass) = (action::DROP, action::PASS);
        verdicts(
            &any(&[7148, 7149]),
            &[
                ("v4 to our port", f(s4, "10.0.0.2:7148", 0), hit),
                ("v4 to 2nd port", f(s4, "10.0.0.2:7149", 0), hit),
                ("v4 options", f(s4, "10.0.0.2:7148", 3), hit),
                ("v4 other port", f(s4, "10.0.0.2:53", 0), pass),
                ("v6 to our port", f(s6, "[fe80::2]:7148", 0), hit),
                ("v6 other port", f(s6, "[fe80::2]:7150", 0), pass),
                ("v4 fragment", frag, pass),
                ("v6 ext header", ext, pass),
                ("ARP", arp(), pass),
                ("short", short, pass),
            ],
        );
        verdicts(
            &Match::ports(&[7148], Some("10.0.0.2".parse().unwrap())),
            &[
                ("our address", f(s4, "10.0.0.2:7148", 0), hit),
                ("other address", f(s4, "10.0.0.3:7148", 0), pass),
                ("v6 with v4 address", f(s6, "[fe80::2]:7148", 0), pass),
            ],
        );
        verdicts(
            &Match::ports(&[7148], Some("fe80::2".parse().unwrap())),
            &[
                ("our v6 address", f(s6, "[fe80::2]:7148", 0), hit),
                ("other v6 address", f(s6, "[fe80::3]:7148", 0), pass),
                ("v4 with v6 address", f(s4, "10.0.0.2:7148", 0), pass),
            ],
        );
    }

    /// A list of endpoints of both families, as an endpoint list gives it: each
    /// (address, port) pair is redirected, and a listed address on another listed
    /// endpoint's port is not (it reaches the kernel).
    #[test]
    fn kernel_runs_an_endpoint_list_exactly() {
        let (s4, s6) = ("10.0.0.1:999", "[fe80::1]:999");
        let f = |s: &str, d: &str| udp(s.parse().unwrap(), d.parse().unwrap(), b"abc", 0);
        let m = Match {
            rules: vec![
                at("239.1.1.1", 7148),
                at("239.1.1.2", 7149),
                at("10.0.0.2", 7148),
                at("ff15::1", 7148),
                at("ff15::2", 0),
                Rule {
                    address: None,
                    port: 9000,
                },
            ],
        };
        let (hit, pass) = (action::DROP, action::PASS);
        verdicts(
            &m,
            &[
                ("group 1", f(s4, "239.1.1.1:7148"), hit),
                ("group 2", f(s4, "239.1.1.2:7149"), hit),
                ("unicast", f(s4, "10.0.0.2:7148"), hit),
                ("group 1, group 2's port", f(s4, "239.1.1.1:7149"), pass),
                ("group 2, group 1's port", f(s4, "239.1.1.2:7148"), pass),
                ("unlisted group", f(s4, "239.1.1.3:7148"), pass),
                ("any address on 9000", f(s4, "10.9.9.9:9000"), hit),
                ("v6 any address on 9000", f(s6, "[fe80::7]:9000"), hit),
                ("v6 group", f(s6, "[ff15::1]:7148"), hit),
                ("v6 group, other port", f(s6, "[ff15::1]:7149"), pass),
                ("v6 group on any port", f(s6, "[ff15::2]:1234"), hit),
                (
                    "v6 group differing in its last word",
                    f(s6, "[ff15::3]:7148"),
                    pass,
                ),
                (
                    "v6 group differing in its first word",
                    f(s6, "[ff16::1]:7148"),
                    pass,
                ),
            ],
        );
        // The most endpoints a source takes, all IPv6: the verifier still accepts it.
        let many = Match {
            rules: (0..256u16)
                .map(|k| at(&format!("ff15::{k:x}"), 7148 + k))
                .collect(),
        };
        verdicts(
            &many,
            &[
                ("the last", f(s6, "[ff15::ff]:7403"), hit),
                (
                    "the last's address, the first's port",
                    f(s6, "[ff15::ff]:7148"),
                    pass,
                ),
            ],
        );
    }
}
