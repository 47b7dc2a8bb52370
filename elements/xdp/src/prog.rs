//! The XDP program `fhxdpsrc` loads: redirect UDP to the chosen destination port(s)
//! (and address, if set) into the AF_XDP socket of the receiving queue, pass
//! everything else to the kernel, so ARP, ICMP, SSH and other UDP keep working.
//!
//! Generated with the [`crate::bpf`] assembler at start, with the ports and address as
//! immediates, so the program needs no map lookups besides the XSKMAP. Frames it does
//! not fully understand (VLAN tags, IPv4 fragments, IPv6 extension headers, short
//! frames) go to the kernel, never to the socket.

use std::net::IpAddr;

use crate::bpf::{Alu, Asm, AsmError, Cond, Insn, Size, R0, R1, R2, R3, R4, R5, R6};
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

/// Which datagrams the program redirects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match {
    /// UDP destination ports (at least one).
    pub ports: Vec<u16>,
    /// Destination address; `None` for any. Its family also limits the program to
    /// IPv4 or IPv6.
    pub address: Option<IpAddr>,
}

/// Why no program could be generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgError {
    /// No port to match.
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

/// The program for `m`, redirecting to the XSKMAP `map_fd` at the packet's receive
/// queue. `fallback` is the verdict when that queue has no socket in the map: PASS in
/// production (nothing is lost while no socket listens), DROP in tests, so that a
/// match is observable without a socket.
pub fn redirect_program(m: &Match, map_fd: i32, fallback: u32) -> Result<Vec<Insn>, ProgError> {
    if m.ports.is_empty() {
        return Err(ProgError::NoPorts);
    }
    let v4 = !matches!(m.address, Some(IpAddr::V6(_)));
    let v6 = !matches!(m.address, Some(IpAddr::V4(_)));
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
        if let Some(IpAddr::V4(addr)) = m.address {
            a.push(Insn::load(Size::W, R5, R2, 14 + 16)).jmp32_imm(
                Cond::Ne,
                R5,
                ne32(addr.octets()),
                "pass",
            );
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
        if v6 {
            a.ja("port");
        }
    }
    if v6 {
        a.label("ipv6")
            .push(Insn::mov_reg(R4, R2))
            .push(Insn::alu_imm(Alu::Add, R4, ETH_HLEN + 40 + UDP_HLEN))
            .jmp_reg(Cond::Gt, R4, R3, "pass")
            // Only UDP right after the fixed header; extension headers go to the kernel.
            .push(Insn::load(Size::B, R5, R2, 14 + 6))
            .jmp_imm(Cond::Ne, R5, IPPROTO_UDP, "pass");
        if let Some(IpAddr::V6(addr)) = m.address {
            for (k, word) in addr.octets().chunks_exact(4).enumerate() {
                let w: [u8; 4] = word.try_into().expect("4 bytes");
                a.push(Insn::load(Size::W, R5, R2, 14 + 24 + 4 * k as i16))
                    .jmp32_imm(Cond::Ne, R5, ne32(w), "pass");
            }
        }
        a.push(Insn::load(Size::H, R5, R2, 14 + 40 + 2));
    }

    a.label("port");
    for &p in &m.ports {
        a.jmp_imm(Cond::Eq, R5, ne16(p), "redirect");
    }
    a.ja("pass")
        .label("redirect")
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
        Match {
            ports: ports.to_vec(),
            address: None,
        }
    }

    #[test]
    fn one_port_program_shape() {
        let p = redirect_program(&any(&[7148]), 9, action::PASS).unwrap();
        let eth_types = [ne16(0x0800), ne16(0x86dd)];
        let jumps = port_jumps(&p);
        assert_eq!(jumps[..2], eth_types, "IPv4 then IPv6 dispatch");
        assert_eq!(jumps[2..], [ne16(7148)]);
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
        assert_eq!(port_jumps(&p)[2..], [ne16(5000), ne16(5001), ne16(7148)]);
        let v4 = Match {
            ports: vec![7148],
            address: Some("10.1.2.3".parse().unwrap()),
        };
        let p4 = redirect_program(&v4, 3, action::PASS).unwrap();
        assert_eq!(port_jumps(&p4), [ne16(0x0800), ne16(7148)], "no IPv6 path");
        let addr = u32::from_ne_bytes([10, 1, 2, 3]) as i32;
        assert!(p4.iter().any(|i| i.code == 0x56 && i.imm == addr));
        let v6 = Match {
            ports: vec![7148],
            address: Some("ff02::1:2".parse().unwrap()),
        };
        let p6 = redirect_program(&v6, 3, action::PASS).unwrap();
        assert_eq!(port_jumps(&p6), [ne16(0x86dd), ne16(7148)], "no IPv4 path");
        assert_eq!(p6.iter().filter(|i| i.code == 0x56).count(), 4);
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
            &Match {
                ports: vec![7148],
                address: Some("10.0.0.2".parse().unwrap()),
            },
            &[
                ("our address", f(s4, "10.0.0.2:7148", 0), hit),
                ("other address", f(s4, "10.0.0.3:7148", 0), pass),
                ("v6 with v4 address", f(s6, "[fe80::2]:7148", 0), pass),
            ],
        );
        verdicts(
            &Match {
                ports: vec![7148],
                address: Some("fe80::2".parse().unwrap()),
            },
            &[
                ("our v6 address", f(s6, "[fe80::2]:7148", 0), hit),
                ("other v6 address", f(s6, "[fe80::3]:7148", 0), pass),
                ("v4 with v6 address", f(s4, "10.0.0.2:7148", 0), pass),
            ],
        );
    }
}
