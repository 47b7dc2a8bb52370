//! The real receive device: an RDMA raw-packet queue pair set up the way spead2's
//! `udp_ibv_reader` does it (`src/recv_udp_ibv.cpp`):
//!
//! `ibv_open_device` → `ibv_create_cq` (receive, one entry per slot; send, one entry) →
//! `ibv_alloc_pd` → `ibv_create_qp` (`IBV_QPT_RAW_PACKET`) → `ibv_modify_qp` to INIT on
//! the port → one `ibv_create_flow` per endpoint → `ibv_reg_mr` of the whole region
//! (`IBV_ACCESS_LOCAL_WRITE`) → (the engine posts the slots) →
//! [`VerbsDevice::ready_to_receive`]: `ibv_modify_qp` to RTR. A receive-only raw-packet
//! QP needs no RTS. No completion channel: the element polls (see the docs).
//!
//! Each failing step becomes a [`SetupError`] naming the call, the errno and a fix.
//! Resources are released in reverse order on drop, including after a failed step.
//!
//! None of this has run on RDMA hardware: the machines this was written on have no
//! RDMA kernel support. The WR chain construction ([`build_recv_chain`]) and the error
//! texts are unit-tested; the struct layouts are checked against `verbs.h`.

use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::Arc;

use firehose_core::MemoryRegion;

use crate::engine::{Completion, CompletionStatus, DeviceError, PostError, PostSlot, RxDevice};
use crate::flow::FlowRule;
use crate::sys::{self, ibv_context, ibv_cq, ibv_flow, ibv_mr, ibv_pd, ibv_qp, ibv_recv_wr};
use crate::sys::{ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_sge, ibv_wc};
use crate::verbs::{self, Verbs};

/// A set-up step of the queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupStep {
    /// libibverbs could not be loaded (only after a probe that succeeded: unlikely).
    Load,
    /// `ibv_open_device`.
    OpenDevice,
    /// `ibv_create_cq`.
    CreateCq,
    /// `ibv_alloc_pd`.
    AllocPd,
    /// `ibv_create_qp(RAW_PACKET)`.
    CreateQp,
    /// `ibv_modify_qp(INIT, port)`.
    ModifyQpInit,
    /// `ibv_create_flow`.
    CreateFlow,
    /// `ibv_reg_mr`.
    RegMr,
    /// `ibv_modify_qp(RTR)`.
    ModifyQpRtr,
}

impl SetupStep {
    /// The call as it appears in messages.
    pub fn call(self) -> &'static str {
        match self {
            Self::Load => "dlopen(libibverbs.so.1)",
            Self::OpenDevice => "ibv_open_device",
            Self::CreateCq => "ibv_create_cq",
            Self::AllocPd => "ibv_alloc_pd",
            Self::CreateQp => "ibv_create_qp(RAW_PACKET)",
            Self::ModifyQpInit => "ibv_modify_qp(INIT)",
            Self::CreateFlow => "ibv_create_flow",
            Self::RegMr => "ibv_reg_mr",
            Self::ModifyQpRtr => "ibv_modify_qp(RTR)",
        }
    }

    /// What to do about `errno` at this step.
    pub fn fix(self, errno: i32) -> &'static str {
        use libc::*;
        match (self, errno) {
            (Self::OpenDevice, EACCES | EPERM) => {
                "no access to /dev/infiniband/uverbs*; run as root or grant the user access (udev rule, rdma group)"
            }
            (Self::CreateCq | Self::CreateQp, ENOMEM) => {
                "lower `slots` (the queues need one entry per slot) or raise the locked-memory limit (ulimit -l unlimited; systemd LimitMEMLOCK=infinity)"
            }
            (Self::CreateQp, EPERM | EACCES | EINVAL) => {
                "raw-packet QPs need CAP_NET_RAW; run as root (or setcap cap_net_raw+ep on the program). EINVAL can also mean `slots` exceeds the device's max_qp_wr (ibv_devinfo -v)"
            }
            (Self::CreateQp, EOPNOTSUPP) => {
                "this device has no raw-packet QPs; use an Ethernet RDMA NIC (e.g. NVIDIA/Mellanox ConnectX-4 or later)"
            }
            (Self::ModifyQpInit, EINVAL) => {
                "the port is not a port of this device; set `interface` to the NIC's network interface (ibv_devinfo lists ports)"
            }
            (Self::CreateFlow, EOPNOTSUPP | ENOSYS) => {
                "the device or driver has no flow steering; ConnectX-4 or later is needed (ConnectX-3: options mlx4_core log_num_mgm_entry_size=-1)"
            }
            (Self::CreateFlow, EPERM | EACCES) => {
                "flow steering rules need CAP_NET_RAW; run as root"
            }
            (Self::CreateFlow, EINVAL) => {
                "the NIC rejected the rule; check `address` (IPv4) and `port`"
            }
            (Self::CreateFlow, ENOMEM | ENOSPC) => {
                "the NIC's steering table is full; remove other rules or receivers"
            }
            (Self::RegMr, ENOMEM | EPERM | EFAULT | EAGAIN) => {
                "raise the locked-memory limit (ulimit -l unlimited; systemd LimitMEMLOCK=infinity) or lower slots × slot-size"
            }
            (Self::Load, _) => "install rdma-core's libibverbs1",
            _ => "check the device with ibv_devinfo and the kernel log (dmesg)",
        }
    }
}

/// A set-up step that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupError {
    /// Which step.
    pub step: SetupStep,
    /// Its errno (0 if the library gave none).
    pub errno: i32,
    /// Where: device, port, endpoint.
    pub context: String,
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cause = if self.errno == 0 {
            "no error number given".to_string()
        } else {
            format!("{} (errno {})", verbs::strerror(self.errno), self.errno)
        };
        write!(
            f,
            "{} failed on {}: {} — {}",
            self.step.call(),
            self.context,
            cause,
            self.step.fix(self.errno)
        )
    }
}

impl std::error::Error for SetupError {}

/// Fills `wrs[..n]` and `sges[..n]` (n = `slots.len()`) as one receive chain and returns
/// its head (NULL if `slots` is empty): `wr_id` = slot, one SGE each with the slot's
/// address and length and `lkey`, `next` linking to the following WR, the last NULL.
/// The pointers refer into `wrs` and `sges`, which must stay in place until posted.
///
/// Panics if `wrs` or `sges` is shorter than `slots`.
pub fn build_recv_chain(
    slots: &[PostSlot],
    lkey: u32,
    wrs: &mut [ibv_recv_wr],
    sges: &mut [ibv_sge],
) -> *mut ibv_recv_wr {
    let n = slots.len();
    assert!(wrs.len() >= n && sges.len() >= n);
    let wp = wrs.as_mut_ptr();
    let sp = sges.as_mut_ptr();
    for (i, s) in slots.iter().enumerate() {
        sges[i] = ibv_sge {
            addr: s.addr,
            length: s.len,
            lkey,
        };
        wrs[i] = ibv_recv_wr {
            wr_id: u64::from(s.slot),
            next: if i + 1 < n {
                wp.wrapping_add(i + 1)
            } else {
                std::ptr::null_mut()
            },
            sg_list: sp.wrapping_add(i),
            num_sge: 1,
        };
    }
    if n == 0 {
        std::ptr::null_mut()
    } else {
        wp
    }
}

/// Turns one work completion into the engine's view.
pub fn completion_of(wc: &ibv_wc) -> Completion {
    Completion {
        slot: u32::try_from(wc.wr_id).unwrap_or(u32::MAX),
        status: match wc.status {
            sys::IBV_WC_SUCCESS => CompletionStatus::Success,
            sys::IBV_WC_LOC_LEN_ERR => CompletionStatus::TooLong,
            other => CompletionStatus::Error(other),
        },
        byte_len: wc.byte_len,
    }
}

/// What to open.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// RDMA device name (e.g. `mlx5_0`).
    pub device: String,
    /// Port number on the device (1-based).
    pub port: u8,
    /// Receive slots (receive WRs and CQ entries).
    pub slots: u32,
    /// Slots per posted chain and completions per poll.
    pub batch: u32,
}

/// An open raw-packet receive queue over one registered region.
pub struct VerbsDevice {
    v: &'static Verbs,
    ctx: *mut ibv_context,
    recv_cq: *mut ibv_cq,
    send_cq: *mut ibv_cq,
    pd: *mut ibv_pd,
    qp: *mut ibv_qp,
    flows: Vec<*mut ibv_flow>,
    mr: *mut ibv_mr,
    lkey: u32,
    wrs: Vec<ibv_recv_wr>,
    sges: Vec<ibv_sge>,
    wcs: Vec<ibv_wc>,
    /// Keeps the registered memory mapped until the MR is deregistered.
    region: Arc<MemoryRegion>,
    context: String,
}

// SAFETY: the verbs objects are process-wide library objects usable from any thread
// (libibverbs and its providers lock internally where needed); a VerbsDevice is used by
// one thread at a time through `&mut self`, and owns everything it points to.
unsafe impl Send for VerbsDevice {}

impl VerbsDevice {
    /// Opens `cfg.device` and sets up the queue pair, steering rules and memory
    /// registration for `region` (everything up to, not including, posting).
    pub fn open(
        cfg: &QueueConfig,
        region: Arc<MemoryRegion>,
        rules: &[FlowRule],
    ) -> Result<Self, SetupError> {
        let context = format!("RDMA device {} port {}", cfg.device, cfg.port);
        let err = |step, errno| SetupError {
            step,
            errno,
            context: context.clone(),
        };
        let v = verbs::library().map_err(|_| err(SetupStep::Load, libc::ENOENT))?;
        let batch = cfg.batch.max(1) as usize;
        let ctx = v
            .open_by_name(&cfg.device)
            .map_err(|(_, e)| err(SetupStep::OpenDevice, e))?;
        let mut d = Self {
            v,
            ctx,
            recv_cq: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            flows: Vec::with_capacity(rules.len()),
            mr: std::ptr::null_mut(),
            lkey: 0,
            wrs: vec![ibv_recv_wr::default(); batch],
            sges: vec![ibv_sge::default(); batch],
            wcs: vec![ibv_wc::default(); batch],
            region,
            context: context.clone(),
        };
        let slots = c_int::try_from(cfg.slots).unwrap_or(c_int::MAX);
        // From here on, an early return drops `d`, which releases what exists so far.
        verbs::clear_errno();
        // SAFETY: `ctx` is the open context; no channel, vector 0.
        d.recv_cq =
            unsafe { (v.create_cq)(ctx, slots, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if d.recv_cq.is_null() {
            return Err(err(SetupStep::CreateCq, verbs::errno()));
        }
        verbs::clear_errno();
        // SAFETY: as above; a raw-packet QP needs a send CQ even if it never sends.
        d.send_cq = unsafe { (v.create_cq)(ctx, 1, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if d.send_cq.is_null() {
            return Err(err(SetupStep::CreateCq, verbs::errno()));
        }
        verbs::clear_errno();
        // SAFETY: `ctx` is the open context.
        d.pd = unsafe { (v.alloc_pd)(ctx) };
        if d.pd.is_null() {
            return Err(err(SetupStep::AllocPd, verbs::errno()));
        }
        let mut init = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: d.send_cq,
            recv_cq: d.recv_cq,
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: cfg.slots,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RAW_PACKET,
            sq_sig_all: 0,
        };
        verbs::clear_errno();
        // SAFETY: `pd` and both CQs are live; `init` is a valid ibv_qp_init_attr.
        d.qp = unsafe { (v.create_qp)(d.pd, &mut init) };
        if d.qp.is_null() {
            return Err(err(SetupStep::CreateQp, verbs::errno()));
        }
        d.modify(sys::IBV_QPS_INIT, Some(cfg.port))
            .map_err(|e| err(SetupStep::ModifyQpInit, e))?;
        for rule in rules {
            let mut r = *rule;
            verbs::clear_errno();
            // SAFETY: `qp` is live; `r` is an attr followed by its 3 specs, `size` bytes.
            let flow = unsafe { sys::ibv_create_flow(d.qp, &mut r.attr) };
            if flow.is_null() {
                return Err(err(SetupStep::CreateFlow, verbs::errno()));
            }
            d.flows.push(flow);
        }
        verbs::clear_errno();
        // SAFETY: `pd` is live; the region is mapped for its whole length and stays
        // mapped while `d` holds it (until after ibv_dereg_mr in drop).
        d.mr = unsafe {
            (v.reg_mr)(
                d.pd,
                d.region.as_ptr().cast::<c_void>(),
                d.region.len(),
                sys::IBV_ACCESS_LOCAL_WRITE,
            )
        };
        if d.mr.is_null() {
            return Err(err(SetupStep::RegMr, verbs::errno()));
        }
        // SAFETY: `mr` is the live MR just returned.
        d.lkey = unsafe { (*d.mr).lkey };
        Ok(d)
    }

    /// The device address of region byte 0 (the MR registers virtual addresses).
    pub fn base(&self) -> u64 {
        self.region.as_ptr() as u64
    }

    /// The QP number (for logs).
    pub fn qp_num(&self) -> u32 {
        // SAFETY: `qp` is live for the lifetime of self.
        unsafe { (*self.qp).qp_num }
    }

    /// Moves the QP to RTR, after the first receives are posted: from here the NIC
    /// delivers steered frames into them.
    pub fn ready_to_receive(&mut self) -> Result<(), SetupError> {
        self.modify(sys::IBV_QPS_RTR, None)
            .map_err(|errno| SetupError {
                step: SetupStep::ModifyQpRtr,
                errno,
                context: self.context.clone(),
            })
    }

    /// `ibv_modify_qp` to `state` (and `port`), as spead2's `ibv_qp_t::modify`.
    fn modify(&mut self, state: u32, port: Option<u8>) -> Result<(), i32> {
        let mut attr = ibv_qp_attr {
            qp_state: state,
            port_num: port.unwrap_or(0),
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE | if port.is_some() { sys::IBV_QP_PORT } else { 0 };
        // SAFETY: `qp` is live; `attr` is a complete ibv_qp_attr.
        let rc = unsafe { (self.v.modify_qp)(self.qp, &mut attr, mask) };
        if rc == 0 {
            Ok(())
        } else {
            Err(rc)
        }
    }
}

impl RxDevice for VerbsDevice {
    fn post(&mut self, slots: &[PostSlot]) -> Result<(), PostError> {
        if slots.is_empty() {
            return Ok(());
        }
        if slots.len() > self.wrs.len() {
            // Not on the steady path: the engine posts at most a batch per chain.
            self.wrs.resize(slots.len(), ibv_recv_wr::default());
            self.sges.resize(slots.len(), ibv_sge::default());
        }
        let head = build_recv_chain(slots, self.lkey, &mut self.wrs, &mut self.sges);
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: `qp` is live; the chain lives in self.wrs/self.sges, untouched until
        // the call returns (the provider copies WRs into its queue); every SGE lies in
        // the registered region (the engine's addresses are base + slot offsets).
        let rc = unsafe { sys::ibv_post_recv(self.qp, head, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        // WRs before `bad_wr` were posted; it and those after were not.
        let posted = if bad.is_null() {
            0
        } else {
            (bad as usize - head as usize) / std::mem::size_of::<ibv_recv_wr>()
        };
        Err(PostError {
            posted: posted.min(slots.len()),
            error: DeviceError {
                call: "ibv_post_recv",
                errno: rc,
            },
        })
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, DeviceError> {
        let max = out.len().min(self.wcs.len());
        // SAFETY: `recv_cq` is live; `wcs` has room for `max` entries.
        let n = unsafe { sys::ibv_poll_cq(self.recv_cq, max as c_int, self.wcs.as_mut_ptr()) };
        if n < 0 {
            // Providers return a negative code, not always an errno (mlx5: -2).
            return Err(DeviceError {
                call: "ibv_poll_cq",
                errno: if n == -libc::ENOSYS {
                    libc::ENOSYS
                } else {
                    libc::EIO
                },
            });
        }
        let n = (n as usize).min(max);
        for (o, wc) in out.iter_mut().zip(&self.wcs[..n]) {
            *o = completion_of(wc);
        }
        Ok(n)
    }
}

impl Drop for VerbsDevice {
    fn drop(&mut self) {
        // Reverse order of creation. Return codes are ignored: nothing can be done
        // about a failed teardown, and every object is released exactly once.
        // SAFETY: each pointer is either NULL or a live object created in `open`, and
        // is released once, dependants (flows, QP) before what they depend on.
        unsafe {
            for &f in self.flows.iter().rev() {
                sys::ibv_destroy_flow(f);
            }
            if !self.qp.is_null() {
                (self.v.destroy_qp)(self.qp);
            }
            if !self.mr.is_null() {
                (self.v.dereg_mr)(self.mr);
            }
            if !self.send_cq.is_null() {
                (self.v.destroy_cq)(self.send_cq);
            }
            if !self.recv_cq.is_null() {
                (self.v.destroy_cq)(self.recv_cq);
            }
            if !self.pd.is_null() {
                (self.v.dealloc_pd)(self.pd);
            }
            (self.v.close_device)(self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_chain_links_slots_with_their_addresses() {
        let base = 0x7f00_0000_0000u64;
        let slots: Vec<PostSlot> = [5u32, 6, 7, 9]
            .iter()
            .map(|&s| PostSlot {
                slot: s,
                addr: base + u64::from(s) * 9728,
                len: 9728,
            })
            .collect();
        let mut wrs = vec![ibv_recv_wr::default(); 8];
        let mut sges = vec![ibv_sge::default(); 8];
        let head = build_recv_chain(&slots, 0xabcd, &mut wrs, &mut sges);
        assert_eq!(head, wrs.as_mut_ptr());
        let mut p = head;
        let mut seen = vec![];
        while !p.is_null() {
            // SAFETY: the chain points into `wrs`/`sges`, alive and unmoved.
            let (wr, sge) = unsafe { (*p, *(*p).sg_list) };
            assert_eq!(wr.num_sge, 1);
            assert_eq!(sge.lkey, 0xabcd);
            assert_eq!(sge.length, 9728);
            assert_eq!(
                sge.addr,
                base + wr.wr_id * 9728,
                "addr = base + slot offset"
            );
            seen.push(wr.wr_id as u32);
            p = wr.next;
        }
        assert_eq!(seen, vec![5, 6, 7, 9]);
        for i in 0..4 {
            assert_eq!(wrs[i].sg_list, &mut sges[i] as *mut ibv_sge);
        }
        assert!(wrs[3].next.is_null());
        assert!(build_recv_chain(&[], 1, &mut wrs, &mut sges).is_null());
    }

    #[test]
    fn completions_map_status_and_slot() {
        let wc = ibv_wc {
            wr_id: 42,
            status: sys::IBV_WC_SUCCESS,
            byte_len: 1500,
            ..Default::default()
        };
        assert_eq!(
            completion_of(&wc),
            Completion {
                slot: 42,
                status: CompletionStatus::Success,
                byte_len: 1500
            }
        );
        let too_long = ibv_wc {
            status: sys::IBV_WC_LOC_LEN_ERR,
            ..wc
        };
        assert_eq!(completion_of(&too_long).status, CompletionStatus::TooLong);
        let flushed = ibv_wc { status: 5, ..wc };
        assert_eq!(completion_of(&flushed).status, CompletionStatus::Error(5));
        let stale = ibv_wc {
            wr_id: u64::MAX,
            ..wc
        };
        assert_eq!(completion_of(&stale).slot, u32::MAX);
    }

    #[test]
    fn setup_errors_name_the_step_errno_and_fix() {
        let e = SetupError {
            step: SetupStep::CreateQp,
            errno: libc::EPERM,
            context: "RDMA device mlx5_0 port 1".into(),
        };
        let m = e.to_string();
        assert!(
            m.starts_with("ibv_create_qp(RAW_PACKET) failed on RDMA device mlx5_0 port 1: Operation not permitted (errno 1)"),
            "{m}"
        );
        assert!(
            m.contains("CAP_NET_RAW") && m.contains("run as root"),
            "{m}"
        );
        let m = SetupError {
            step: SetupStep::RegMr,
            errno: libc::ENOMEM,
            context: "x".into(),
        }
        .to_string();
        assert!(m.contains("ibv_reg_mr") && m.contains("ulimit -l"), "{m}");
        let m = SetupError {
            step: SetupStep::CreateFlow,
            errno: libc::EOPNOTSUPP,
            context: "x".into(),
        }
        .to_string();
        assert!(m.contains("flow steering"), "{m}");
        assert!(SetupStep::ModifyQpRtr
            .fix(libc::EIO)
            .contains("ibv_devinfo"));
    }
}
