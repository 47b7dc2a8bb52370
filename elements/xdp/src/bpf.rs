//! A tiny eBPF assembler: just enough instructions for the redirect program in
//! [`crate::prog`], encoded exactly as the kernel's `struct bpf_insn`, with symbolic
//! jump labels resolved at the end. No clang, no ELF, no libbpf.

use std::collections::HashMap;
use std::fmt;

/// An eBPF register (`r0`–`r10`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(u8);

/// Return value / helper result.
pub const R0: Reg = Reg(0);
/// First argument (the context on entry).
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Callee-saved.
pub const R6: Reg = Reg(6);
/// Callee-saved.
pub const R7: Reg = Reg(7);

// Instruction classes.
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
// Operand source.
const K: u8 = 0x00;
const X: u8 = 0x08;
// Memory modes.
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const DW: u8 = 0x18;
/// `src_reg` of a 64-bit immediate load that names a map by file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// Load / store widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// 1 byte.
    B = 0x10,
    /// 2 bytes.
    H = 0x08,
    /// 4 bytes.
    W = 0x00,
}

/// 64-bit ALU operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    /// `dst += src`.
    Add = 0x00,
    /// `dst &= src`.
    And = 0x50,
    /// `dst <<= src`.
    Lsh = 0x60,
    /// `dst = src`.
    Mov = 0xb0,
}

/// Conditional jumps (unsigned comparisons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `==`.
    Eq = 0x10,
    /// `>`.
    Gt = 0x20,
    /// `!=`.
    Ne = 0x50,
    /// `<`.
    Lt = 0xa0,
}

/// One `struct bpf_insn`: opcode, registers, offset, immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Insn {
    /// Opcode (class | size/op | mode/source).
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high nibble.
    pub regs: u8,
    /// Signed offset (memory displacement or jump distance in instructions).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Self {
        Self {
            code,
            regs: (src.0 << 4) | (dst.0 & 0x0f),
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads (little-endian fields on x86; native order in
    /// general, since the kernel reads the struct in place).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// `dst op= imm` (64-bit).
    pub fn alu_imm(op: Alu, dst: Reg, imm: i32) -> Self {
        Self::new(ALU64 | op as u8 | K, dst, R0, 0, imm)
    }

    /// `dst op= src` (64-bit).
    pub fn alu_reg(op: Alu, dst: Reg, src: Reg) -> Self {
        Self::new(ALU64 | op as u8 | X, dst, src, 0, 0)
    }

    /// `dst = imm`.
    pub fn mov_imm(dst: Reg, imm: i32) -> Self {
        Self::alu_imm(Alu::Mov, dst, imm)
    }

    /// `dst = src`.
    pub fn mov_reg(dst: Reg, src: Reg) -> Self {
        Self::alu_reg(Alu::Mov, dst, src)
    }

    /// `dst = *(size *)(src + off)`.
    pub fn load(size: Size, dst: Reg, src: Reg, off: i16) -> Self {
        Self::new(LDX | MEM | size as u8, dst, src, off, 0)
    }

    /// `call helper`.
    pub fn call(helper: i32) -> Self {
        Self::new(JMP | 0x80, R0, R0, 0, helper)
    }

    /// `exit` (return r0).
    pub fn exit() -> Self {
        Self::new(JMP | 0x90, R0, R0, 0, 0)
    }

    /// The two instructions of `dst = map (by fd)`: a 64-bit immediate load whose
    /// `src_reg` tells the verifier to replace the fd with the map's address.
    pub fn load_map_fd(dst: Reg, fd: i32) -> [Self; 2] {
        [
            Self::new(LD | IMM | DW, dst, Reg(PSEUDO_MAP_FD), 0, fd),
            Self::default(),
        ]
    }
}

/// Why a program could not be assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsmError {
    /// A jump names a label that was never placed.
    UnknownLabel(&'static str),
    /// A label was placed twice.
    DuplicateLabel(&'static str),
    /// A jump is further than a 16-bit offset reaches.
    TooFar(&'static str),
}

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownLabel(l) => write!(f, "jump to unknown label {l}"),
            Self::DuplicateLabel(l) => write!(f, "label {l} placed twice"),
            Self::TooFar(l) => write!(f, "jump to {l} is too far"),
        }
    }
}

impl std::error::Error for AsmError {}

/// A program under construction: instructions plus jumps to labels not yet placed.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: HashMap<&'static str, usize>,
    fixups: Vec<(usize, &'static str)>,
    duplicate: Option<&'static str>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one instruction.
    pub fn push(&mut self, insn: Insn) -> &mut Self {
        self.insns.push(insn);
        self
    }

    /// Appends several instructions (e.g. the two halves of [`Insn::load_map_fd`]).
    pub fn extend(&mut self, insns: impl IntoIterator<Item = Insn>) -> &mut Self {
        self.insns.extend(insns);
        self
    }

    /// Places `name` at the next instruction.
    pub fn label(&mut self, name: &'static str) -> &mut Self {
        if self.labels.insert(name, self.insns.len()).is_some() {
            self.duplicate.get_or_insert(name);
        }
        self
    }

    /// `if dst cond imm goto label`.
    pub fn jmp_imm(&mut self, cond: Cond, dst: Reg, imm: i32, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.push(Insn::new(JMP | cond as u8 | K, dst, R0, 0, imm))
    }

    /// `if dst cond src goto label`.
    pub fn jmp_reg(&mut self, cond: Cond, dst: Reg, src: Reg, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.push(Insn::new(JMP | cond as u8 | X, dst, src, 0, 0))
    }

    /// `if (u32)dst cond (u32)imm goto label`: compares the low 32 bits only, so a
    /// 32-bit constant needs no sign-extension care.
    pub fn jmp32_imm(&mut self, cond: Cond, dst: Reg, imm: i32, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.push(Insn::new(JMP32 | cond as u8 | K, dst, R0, 0, imm))
    }

    /// `if dst cond imm` skip the next `n` instructions: a jump within a block whose
    /// length is known where it is generated (one per endpoint, which a fixed label
    /// name cannot tell apart).
    pub fn skip_imm(&mut self, cond: Cond, dst: Reg, imm: i32, n: i16) -> &mut Self {
        self.push(Insn::new(JMP | cond as u8 | K, dst, R0, n, imm))
    }

    /// [`Asm::skip_imm`] comparing the low 32 bits only.
    pub fn skip32_imm(&mut self, cond: Cond, dst: Reg, imm: i32, n: i16) -> &mut Self {
        self.push(Insn::new(JMP32 | cond as u8 | K, dst, R0, n, imm))
    }

    /// `goto label`.
    pub fn ja(&mut self, label: &'static str) -> &mut Self {
        self.fixups.push((self.insns.len(), label));
        self.push(Insn::new(JMP, R0, R0, 0, 0))
    }

    /// Resolves the jumps (offsets count instructions after the jump) and returns the
    /// program.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(d) = self.duplicate {
            return Err(AsmError::DuplicateLabel(d));
        }
        for &(at, label) in &self.fixups {
            let target = *self
                .labels
                .get(label)
                .ok_or(AsmError::UnknownLabel(label))?;
            let off = target as i64 - at as i64 - 1;
            self.insns[at].off = i16::try_from(off).map_err(|_| AsmError::TooFar(label))?;
        }
        Ok(self.insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(i: Insn) -> String {
        i.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Encodings checked against `llvm-objdump -d` of clang-built XDP objects and the
    /// kernel's instruction-set document (x86, little-endian fields).
    #[test]
    fn encodings_match_the_kernel_abi() {
        assert_eq!(hex(Insn::mov_imm(R0, 2)), "b700000002000000");
        assert_eq!(hex(Insn::exit()), "9500000000000000");
        assert_eq!(hex(Insn::mov_reg(R6, R1)), "bf16000000000000");
        assert_eq!(hex(Insn::load(Size::W, R2, R1, 0)), "6112000000000000");
        assert_eq!(hex(Insn::load(Size::W, R3, R1, 4)), "6113040000000000");
        assert_eq!(hex(Insn::load(Size::H, R5, R2, 12)), "69250c0000000000");
        assert_eq!(hex(Insn::load(Size::B, R5, R2, 23)), "7125170000000000");
        assert_eq!(hex(Insn::alu_imm(Alu::Add, R4, 14)), "070400000e000000");
        assert_eq!(hex(Insn::alu_imm(Alu::And, R5, 15)), "570500000f000000");
        assert_eq!(hex(Insn::alu_imm(Alu::Lsh, R5, 2)), "6705000002000000");
        assert_eq!(hex(Insn::alu_reg(Alu::Add, R7, R5)), "0f57000000000000");
        assert_eq!(hex(Insn::call(51)), "8500000033000000");
        let [a, b] = Insn::load_map_fd(R1, 5);
        assert_eq!(hex(a), "1811000005000000");
        assert_eq!(hex(b), "0000000000000000");
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }

    #[test]
    fn jumps_resolve_forwards_and_backwards() {
        let mut a = Asm::new();
        a.label("top")
            .jmp_imm(Cond::Ne, R5, 17, "out") // 0: skips 1 and 2
            .jmp_reg(Cond::Gt, R4, R3, "out") // 1
            .ja("top") // 2: back to 0
            .label("out")
            .push(Insn::exit()) // 3
            .jmp32_imm(Cond::Ne, R5, -1, "out"); // 4: back to 3
        let p = a.finish().unwrap();
        assert_eq!(hex(p[4]), "5605feffffffffff");
        assert_eq!(hex(p[0]), "5505020011000000");
        assert_eq!(hex(p[1]), "2d34010000000000");
        assert_eq!(p[2].off, -3);
        assert_eq!(hex(p[2]), "0500fdff00000000");
        assert_eq!(p[3], Insn::exit());
        let mut a = Asm::new();
        a.skip_imm(Cond::Ne, R5, 17, 2)
            .skip32_imm(Cond::Ne, R4, -1, 1);
        let p = a.finish().unwrap();
        assert_eq!(hex(p[0]), "5505020011000000");
        assert_eq!(hex(p[1]), "56040100ffffffff");
    }

    #[test]
    fn label_mistakes_are_errors() {
        let mut a = Asm::new();
        a.ja("nowhere");
        assert_eq!(a.finish(), Err(AsmError::UnknownLabel("nowhere")));
        let mut a = Asm::new();
        a.label("x").label("x").push(Insn::exit());
        assert_eq!(a.finish(), Err(AsmError::DuplicateLabel("x")));
        let mut a = Asm::new();
        a.ja("far");
        for _ in 0..40_000 {
            a.push(Insn::mov_imm(R0, 0));
        }
        a.label("far");
        assert_eq!(a.finish(), Err(AsmError::TooFar("far")));
    }
}
