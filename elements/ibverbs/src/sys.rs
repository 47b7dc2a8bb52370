//! The part of rdma-core's `<infiniband/verbs.h>` that `fhibvsrc` touches, written by
//! hand as `#[repr(C)]` Rust, plus the header's `static inline` verbs the receive path
//! needs ([`ibv_post_recv`], [`ibv_poll_cq`], [`ibv_create_flow`], [`ibv_destroy_flow`])
//! re-implemented over these layouts.
//!
//! Why by hand and not bindgen: the crate must build without rdma-core (no build-time
//! bindgen), and a committed bindgen file of all of `verbs.h` would be thousands of lines
//! of which we use two dozen fields. Every struct here is either complete (all fields,
//! so `size_of` matches) or has its unused leading/trailing members folded into opaque
//! arrays of the same size. Implicit C padding is written out as `_padN` fields, so a
//! flow rule ([`crate::flow::FlowRule`]) has no uninitialised bytes and can be compared
//! byte for byte. `tests/layout.rs` compiles a C program against the installed
//! `verbs.h` and checks every size, offset and constant used here against
//! `size_of`/`offset_of!` — a wrong layout fails that test.
//!
//! The ABI these mirror is that of rdma-core ≥ 13 (Debian 12 ships 44): the
//! `verbs_context` slots for `ibv_create_flow` / `ibv_destroy_flow` moved around v13;
//! spead2 carries a work-around for older libraries, this crate does not.
//!
//! Names keep the C spelling so each line can be checked against the header.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_void};
use std::mem::offset_of;

/// `IBV_QPT_RAW_PACKET` (`enum ibv_qp_type`).
pub const IBV_QPT_RAW_PACKET: u32 = 8;
/// `IBV_QPS_RESET` (`enum ibv_qp_state`).
pub const IBV_QPS_RESET: u32 = 0;
/// `IBV_QPS_INIT`.
pub const IBV_QPS_INIT: u32 = 1;
/// `IBV_QPS_RTR`.
pub const IBV_QPS_RTR: u32 = 2;
/// `IBV_QP_STATE` (`enum ibv_qp_attr_mask`).
pub const IBV_QP_STATE: c_int = 1 << 0;
/// `IBV_QP_PORT`.
pub const IBV_QP_PORT: c_int = 1 << 5;
/// `IBV_ACCESS_LOCAL_WRITE` (`enum ibv_access_flags`).
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
/// `IBV_WC_SUCCESS` (`enum ibv_wc_status`).
pub const IBV_WC_SUCCESS: u32 = 0;
/// `IBV_WC_LOC_LEN_ERR`: the frame was longer than the posted buffer.
pub const IBV_WC_LOC_LEN_ERR: u32 = 1;
/// `IBV_FLOW_ATTR_NORMAL` (`enum ibv_flow_attr_type`).
pub const IBV_FLOW_ATTR_NORMAL: u32 = 0;
/// `IBV_FLOW_SPEC_ETH` (`enum ibv_flow_spec_type`).
pub const IBV_FLOW_SPEC_ETH: u32 = 0x20;
/// `IBV_FLOW_SPEC_IPV4`.
pub const IBV_FLOW_SPEC_IPV4: u32 = 0x30;
/// `IBV_FLOW_SPEC_UDP`.
pub const IBV_FLOW_SPEC_UDP: u32 = 0x41;
/// `__VERBS_ABI_IS_EXTENDED`: `((void *)UINTPTR_MAX)`, stored in
/// `ibv_context::abi_compat` when the context is embedded in a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `struct ibv_device` (opaque).
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `struct ibv_pd` (opaque: only passed back to the library).
#[repr(C)]
pub struct ibv_pd {
    _opaque: [u8; 0],
}

/// `struct ibv_comp_channel` (opaque).
#[repr(C)]
pub struct ibv_comp_channel {
    _opaque: [u8; 0],
}

/// `ops.poll_cq`: `int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);`
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ops.post_recv`: `int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr,
/// struct ibv_recv_wr **bad_wr);`
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `verbs_context::ibv_create_flow`:
/// `struct ibv_flow * (*ibv_create_flow) (struct ibv_qp *qp, struct ibv_flow_attr *flow_attr);`
pub type CreateFlowFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow;
/// `verbs_context::ibv_destroy_flow`: `int (*ibv_destroy_flow) (struct ibv_flow *flow);`
pub type DestroyFlowFn = unsafe extern "C" fn(*mut ibv_flow) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers, of which the receive path calls
/// `poll_cq` (the 12th) and `post_recv` (the 27th).
#[repr(C)]
pub struct ibv_context_ops {
    /// `_compat_query_device` … `_compat_create_cq` (11 pointers).
    _before_poll_cq: [*mut c_void; 11],
    /// `poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `req_notify_cq` … `post_send` (14 pointers).
    _before_post_recv: [*mut c_void; 14],
    /// `post_recv`.
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah` … `_compat_async_event` (5 pointers).
    _after_post_recv: [*mut c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    /// `struct ibv_device *device;`
    pub device: *mut ibv_device,
    /// `struct ibv_context_ops ops;`
    pub ops: ibv_context_ops,
    /// `int cmd_fd;`
    pub cmd_fd: c_int,
    /// `int async_fd;`
    pub async_fd: c_int,
    /// `int num_comp_vectors;`
    pub num_comp_vectors: c_int,
    /// `pthread_mutex_t mutex;`
    pub mutex: libc::pthread_mutex_t,
    /// `void *abi_compat;` — [`VERBS_ABI_IS_EXTENDED`] for an extended context.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`, which "grows up": new members are added at the top, and
/// `struct ibv_context context` is always last, so members are found by their distance
/// *before* `context`. Only the tail from `ibv_destroy_flow` on is spelled out.
#[repr(C)]
pub struct verbs_context {
    /// `query_port` … `query_device_ex` (26 function pointers, `priv`, one more).
    _head: [*mut c_void; 28],
    /// `int (*ibv_destroy_flow) (struct ibv_flow *flow);`
    pub ibv_destroy_flow: Option<DestroyFlowFn>,
    /// `void (*ABI_placeholder2) (void);`
    _abi_placeholder2: *mut c_void,
    /// `struct ibv_flow * (*ibv_create_flow) (struct ibv_qp *qp, struct ibv_flow_attr *flow_attr);`
    pub ibv_create_flow: Option<CreateFlowFn>,
    /// `ABI_placeholder1`, `open_qp`, `create_qp_ex`, `get_srq_num`, `create_srq_ex`,
    /// `open_xrcd`, `close_xrcd`.
    _mid: [*mut c_void; 7],
    /// `uint64_t _ABI_placeholder3;`
    _abi_placeholder3: u64,
    /// `size_t sz;` — the library's `sizeof(struct verbs_context)`.
    pub sz: usize,
    /// `struct ibv_context context;`
    pub context: ibv_context,
}

/// `struct ibv_cq` (complete; the receive path reads only `context`).
#[repr(C)]
pub struct ibv_cq {
    /// `struct ibv_context *context;`
    pub context: *mut ibv_context,
    /// `struct ibv_comp_channel *channel;`
    pub channel: *mut ibv_comp_channel,
    /// `void *cq_context;`
    pub cq_context: *mut c_void,
    /// `uint32_t handle;`
    pub handle: u32,
    /// `int cqe;`
    pub cqe: c_int,
    /// `pthread_mutex_t mutex;`
    pub mutex: libc::pthread_mutex_t,
    /// `pthread_cond_t cond;`
    pub cond: libc::pthread_cond_t,
    /// `uint32_t comp_events_completed;`
    pub comp_events_completed: u32,
    /// `uint32_t async_events_completed;`
    pub async_events_completed: u32,
}

/// `struct ibv_qp` (complete; the receive path reads `context` and `qp_num`).
#[repr(C)]
pub struct ibv_qp {
    /// `struct ibv_context *context;`
    pub context: *mut ibv_context,
    /// `void *qp_context;`
    pub qp_context: *mut c_void,
    /// `struct ibv_pd *pd;`
    pub pd: *mut ibv_pd,
    /// `struct ibv_cq *send_cq;`
    pub send_cq: *mut ibv_cq,
    /// `struct ibv_cq *recv_cq;`
    pub recv_cq: *mut ibv_cq,
    /// `struct ibv_srq *srq;`
    pub srq: *mut c_void,
    /// `uint32_t handle;`
    pub handle: u32,
    /// `uint32_t qp_num;`
    pub qp_num: u32,
    /// `enum ibv_qp_state state;`
    pub state: u32,
    /// `enum ibv_qp_type qp_type;`
    pub qp_type: u32,
    /// `pthread_mutex_t mutex;`
    pub mutex: libc::pthread_mutex_t,
    /// `pthread_cond_t cond;`
    pub cond: libc::pthread_cond_t,
    /// `uint32_t events_completed;`
    pub events_completed: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    /// `struct ibv_context *context;`
    pub context: *mut ibv_context,
    /// `struct ibv_pd *pd;`
    pub pd: *mut ibv_pd,
    /// `void *addr;`
    pub addr: *mut c_void,
    /// `size_t length;`
    pub length: usize,
    /// `uint32_t handle;`
    pub handle: u32,
    /// `uint32_t lkey;` — goes into every receive SGE.
    pub lkey: u32,
    /// `uint32_t rkey;`
    pub rkey: u32,
}

/// `struct ibv_flow`.
#[repr(C)]
pub struct ibv_flow {
    /// `uint32_t comp_mask;`
    pub comp_mask: u32,
    /// `struct ibv_context *context;`
    pub context: *mut ibv_context,
    /// `uint32_t handle;`
    pub handle: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_sge {
    /// `uint64_t addr;`
    pub addr: u64,
    /// `uint32_t length;`
    pub length: u32,
    /// `uint32_t lkey;`
    pub lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_recv_wr {
    /// `uint64_t wr_id;` — the ring slot index.
    pub wr_id: u64,
    /// `struct ibv_recv_wr *next;`
    pub next: *mut ibv_recv_wr,
    /// `struct ibv_sge *sg_list;`
    pub sg_list: *mut ibv_sge,
    /// `int num_sge;`
    pub num_sge: c_int,
}

impl Default for ibv_recv_wr {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        }
    }
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_wc {
    /// `uint64_t wr_id;`
    pub wr_id: u64,
    /// `enum ibv_wc_status status;`
    pub status: u32,
    /// `enum ibv_wc_opcode opcode;`
    pub opcode: u32,
    /// `uint32_t vendor_err;`
    pub vendor_err: u32,
    /// `uint32_t byte_len;`
    pub byte_len: u32,
    /// `union { __be32 imm_data; uint32_t invalidated_rkey; };`
    pub imm_data: u32,
    /// `uint32_t qp_num;`
    pub qp_num: u32,
    /// `uint32_t src_qp;`
    pub src_qp: u32,
    /// `unsigned int wc_flags;`
    pub wc_flags: u32,
    /// `uint16_t pkey_index;`
    pub pkey_index: u16,
    /// `uint16_t slid;`
    pub slid: u16,
    /// `uint8_t sl;`
    pub sl: u8,
    /// `uint8_t dlid_path_bits;`
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    /// `uint32_t max_send_wr;`
    pub max_send_wr: u32,
    /// `uint32_t max_recv_wr;`
    pub max_recv_wr: u32,
    /// `uint32_t max_send_sge;`
    pub max_send_sge: u32,
    /// `uint32_t max_recv_sge;`
    pub max_recv_sge: u32,
    /// `uint32_t max_inline_data;`
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    /// `void *qp_context;`
    pub qp_context: *mut c_void,
    /// `struct ibv_cq *send_cq;`
    pub send_cq: *mut ibv_cq,
    /// `struct ibv_cq *recv_cq;`
    pub recv_cq: *mut ibv_cq,
    /// `struct ibv_srq *srq;`
    pub srq: *mut c_void,
    /// `struct ibv_qp_cap cap;`
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type qp_type;`
    pub qp_type: u32,
    /// `int sq_sig_all;`
    pub sq_sig_all: c_int,
}

/// `union ibv_gid`: 16 bytes, 8-byte aligned (its other member is two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid {
    /// `uint8_t raw[16];`
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    /// `union ibv_gid dgid;`
    pub dgid: ibv_gid,
    /// `uint32_t flow_label;`
    pub flow_label: u32,
    /// `uint8_t sgid_index;`
    pub sgid_index: u8,
    /// `uint8_t hop_limit;`
    pub hop_limit: u8,
    /// `uint8_t traffic_class;`
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    /// `struct ibv_global_route grh;`
    pub grh: ibv_global_route,
    /// `uint16_t dlid;`
    pub dlid: u16,
    /// `uint8_t sl;`
    pub sl: u8,
    /// `uint8_t src_path_bits;`
    pub src_path_bits: u8,
    /// `uint8_t static_rate;`
    pub static_rate: u8,
    /// `uint8_t is_global;`
    pub is_global: u8,
    /// `uint8_t port_num;`
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (complete: `ibv_modify_qp` reads the fields its mask names,
/// but the whole struct must be there).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state qp_state;`
    pub qp_state: u32,
    /// `enum ibv_qp_state cur_qp_state;`
    pub cur_qp_state: u32,
    /// `enum ibv_mtu path_mtu;`
    pub path_mtu: u32,
    /// `enum ibv_mig_state path_mig_state;`
    pub path_mig_state: u32,
    /// `uint32_t qkey;`
    pub qkey: u32,
    /// `uint32_t rq_psn;`
    pub rq_psn: u32,
    /// `uint32_t sq_psn;`
    pub sq_psn: u32,
    /// `uint32_t dest_qp_num;`
    pub dest_qp_num: u32,
    /// `unsigned int qp_access_flags;`
    pub qp_access_flags: u32,
    /// `struct ibv_qp_cap cap;`
    pub cap: ibv_qp_cap,
    /// `struct ibv_ah_attr ah_attr;`
    pub ah_attr: ibv_ah_attr,
    /// `struct ibv_ah_attr alt_ah_attr;`
    pub alt_ah_attr: ibv_ah_attr,
    /// `uint16_t pkey_index;`
    pub pkey_index: u16,
    /// `uint16_t alt_pkey_index;`
    pub alt_pkey_index: u16,
    /// `uint8_t en_sqd_async_notify;`
    pub en_sqd_async_notify: u8,
    /// `uint8_t sq_draining;`
    pub sq_draining: u8,
    /// `uint8_t max_rd_atomic;`
    pub max_rd_atomic: u8,
    /// `uint8_t max_dest_rd_atomic;`
    pub max_dest_rd_atomic: u8,
    /// `uint8_t min_rnr_timer;`
    pub min_rnr_timer: u8,
    /// `uint8_t port_num;`
    pub port_num: u8,
    /// `uint8_t timeout;`
    pub timeout: u8,
    /// `uint8_t retry_cnt;`
    pub retry_cnt: u8,
    /// `uint8_t rnr_retry;`
    pub rnr_retry: u8,
    /// `uint8_t alt_port_num;`
    pub alt_port_num: u8,
    /// `uint8_t alt_timeout;`
    pub alt_timeout: u8,
    /// `uint32_t rate_limit;`
    pub rate_limit: u32,
}

/// `struct ibv_flow_attr`, with its 2 bytes of C padding after `port` spelled out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_attr {
    /// `uint32_t comp_mask;`
    pub comp_mask: u32,
    /// `enum ibv_flow_attr_type type;`
    pub type_: u32,
    /// `uint16_t size;` — of the attr plus all its specs.
    pub size: u16,
    /// `uint16_t priority;`
    pub priority: u16,
    /// `uint8_t num_of_specs;`
    pub num_of_specs: u8,
    /// `uint8_t port;`
    pub port: u8,
    /// (C padding)
    pub _pad0: u16,
    /// `uint32_t flags;`
    pub flags: u32,
}

/// `struct ibv_flow_eth_filter`. Multi-byte fields are in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_eth_filter {
    /// `uint8_t dst_mac[6];`
    pub dst_mac: [u8; 6],
    /// `uint8_t src_mac[6];`
    pub src_mac: [u8; 6],
    /// `uint16_t ether_type;`
    pub ether_type: u16,
    /// `uint16_t vlan_tag;`
    pub vlan_tag: u16,
}

/// `struct ibv_flow_spec_eth` (40 bytes, C padding spelled out).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_spec_eth {
    /// `enum ibv_flow_spec_type type;`
    pub type_: u32,
    /// `uint16_t size;`
    pub size: u16,
    /// `struct ibv_flow_eth_filter val;`
    pub val: ibv_flow_eth_filter,
    /// `struct ibv_flow_eth_filter mask;`
    pub mask: ibv_flow_eth_filter,
    /// (C padding at the end)
    pub _pad0: u16,
}

/// `struct ibv_flow_ipv4_filter`. Addresses in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_ipv4_filter {
    /// `uint32_t src_ip;`
    pub src_ip: u32,
    /// `uint32_t dst_ip;`
    pub dst_ip: u32,
}

/// `struct ibv_flow_spec_ipv4` (24 bytes, C padding spelled out).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_spec_ipv4 {
    /// `enum ibv_flow_spec_type type;`
    pub type_: u32,
    /// `uint16_t size;`
    pub size: u16,
    /// (C padding before the 4-byte aligned filter)
    pub _pad0: u16,
    /// `struct ibv_flow_ipv4_filter val;`
    pub val: ibv_flow_ipv4_filter,
    /// `struct ibv_flow_ipv4_filter mask;`
    pub mask: ibv_flow_ipv4_filter,
}

/// `struct ibv_flow_tcp_udp_filter`. Ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_tcp_udp_filter {
    /// `uint16_t dst_port;`
    pub dst_port: u16,
    /// `uint16_t src_port;`
    pub src_port: u16,
}

/// `struct ibv_flow_spec_tcp_udp` (16 bytes, C padding spelled out).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_flow_spec_tcp_udp {
    /// `enum ibv_flow_spec_type type;`
    pub type_: u32,
    /// `uint16_t size;`
    pub size: u16,
    /// `struct ibv_flow_tcp_udp_filter val;`
    pub val: ibv_flow_tcp_udp_filter,
    /// `struct ibv_flow_tcp_udp_filter mask;`
    pub mask: ibv_flow_tcp_udp_filter,
    /// (C padding at the end)
    pub _pad0: u16,
}

/// ```c
/// static inline int ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
///                                 struct ibv_recv_wr **bad_wr)
/// {
///         return qp->context->ops.post_recv(qp, wr, bad_wr);
/// }
/// ```
/// (where C would call a NULL `post_recv`, this returns `ENOSYS`).
///
/// # Safety
/// `qp` is a live QP from `ibv_create_qp`; `wr` is a valid chain whose buffers lie in a
/// registered MR; `bad_wr` is writable.
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees `qp` is live; its `context` is the open device
    // context, whose `ops` table the provider filled in at ibv_open_device.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, wr, bad_wr),
            None => libc::ENOSYS,
        }
    }
}

/// ```c
/// static inline int ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
/// {
///         return cq->context->ops.poll_cq(cq, num_entries, wc);
/// }
/// ```
/// (where C would call a NULL `poll_cq`, this returns `-ENOSYS`).
///
/// # Safety
/// `cq` is a live CQ from `ibv_create_cq`; `wc` has room for `num_entries` entries.
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: as for ibv_post_recv: `cq->context` is the open device context.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, num_entries, wc),
            None => -libc::ENOSYS,
        }
    }
}

/// The distance from the start of `verbs_context::context` back to a member at offset
/// `member` of `verbs_context`.
const fn back_from_context(member: usize) -> usize {
    offset_of!(verbs_context, context) - member
}

/// ```c
/// static inline struct verbs_context *verbs_get_ctx(struct ibv_context *ctx)
/// {
///         if (ctx->abi_compat != __VERBS_ABI_IS_EXTENDED)
///                 return NULL;
///         return (struct verbs_context *)(((uint8_t *)ctx) -
///                                         offsetof(struct verbs_context, context));
/// }
/// #define verbs_get_ctx_op(ctx, op) ({ \
///         struct verbs_context *__vctx = verbs_get_ctx(ctx); \
///         (!__vctx || (__vctx->sz < sizeof(*__vctx) - offsetof(struct verbs_context, op)) || \
///          !__vctx->op) ? NULL : __vctx; })
/// ```
/// returning the op itself (`None` where the macro gives NULL). `op_offset` is
/// `offset_of!(verbs_context, op)`. Only `sz` and the op are read, each at its
/// distance before `context`, because a library older than these headers has a smaller
/// `verbs_context` whose start lies after ours.
///
/// # Safety
/// `ctx` is a live context from `ibv_open_device`; `op_offset` is the offset of a
/// member of type `Option<F>` where `F` is an `extern "C" fn` pointer type.
unsafe fn verbs_get_ctx_op<F: Copy>(ctx: *mut ibv_context, op_offset: usize) -> Option<F> {
    // SAFETY: `ctx` is live (caller); abi_compat is a field of ibv_context itself.
    let extended = unsafe { (*ctx).abi_compat } == VERBS_ABI_IS_EXTENDED;
    if !extended {
        return None;
    }
    let base = ctx.cast::<u8>();
    // SAFETY: an extended context is the last member of the library's verbs_context,
    // so `sz` sits immediately before it; the op is read only after `sz` says the
    // library's struct reaches that far back.
    unsafe {
        let sz = base
            .wrapping_sub(back_from_context(offset_of!(verbs_context, sz)))
            .cast::<usize>()
            .read();
        if sz < std::mem::size_of::<verbs_context>() - op_offset {
            return None;
        }
        base.wrapping_sub(back_from_context(op_offset))
            .cast::<Option<F>>()
            .read()
    }
}

/// ```c
/// static inline struct ibv_flow *ibv_create_flow(struct ibv_qp *qp,
///                                                struct ibv_flow_attr *flow)
/// {
///         struct verbs_context *vctx = verbs_get_ctx_op(qp->context,
///                                                       ibv_create_flow);
///         if (!vctx) {
///                 errno = EOPNOTSUPP;
///                 return NULL;
///         }
///         return vctx->ibv_create_flow(qp, flow);
/// }
/// ```
///
/// # Safety
/// `qp` is a live QP; `flow` points at an `ibv_flow_attr` followed by
/// `flow->num_of_specs` specs, `flow->size` bytes in all.
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, flow: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: `qp` is live (caller), so `qp->context` is the open context; the op
    // offset names a `Option<CreateFlowFn>` member.
    unsafe {
        let op: Option<CreateFlowFn> =
            verbs_get_ctx_op((*qp).context, offset_of!(verbs_context, ibv_create_flow));
        match op {
            Some(f) => f(qp, flow),
            None => {
                *libc::__errno_location() = libc::EOPNOTSUPP;
                std::ptr::null_mut()
            }
        }
    }
}

/// ```c
/// static inline int ibv_destroy_flow(struct ibv_flow *flow_id)
/// {
///         struct verbs_context *vctx = verbs_get_ctx_op(flow_id->context,
///                                                       ibv_destroy_flow);
///         if (!vctx)
///                 return EOPNOTSUPP;
///         return vctx->ibv_destroy_flow(flow_id);
/// }
/// ```
///
/// # Safety
/// `flow_id` came from [`ibv_create_flow`] and is destroyed at most once.
pub unsafe fn ibv_destroy_flow(flow_id: *mut ibv_flow) -> c_int {
    // SAFETY: `flow_id` is live (caller); its `context` is the open context.
    unsafe {
        let op: Option<DestroyFlowFn> = verbs_get_ctx_op(
            (*flow_id).context,
            offset_of!(verbs_context, ibv_destroy_flow),
        );
        match op {
            Some(f) => f(flow_id),
            None => libc::EOPNOTSUPP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::mem::MaybeUninit;

    thread_local! {
        static CALLS: Cell<u32> = const { Cell::new(0) };
    }

    unsafe extern "C" fn fake_create_flow(
        _qp: *mut ibv_qp,
        _f: *mut ibv_flow_attr,
    ) -> *mut ibv_flow {
        CALLS.with(|c| c.set(c.get() + 1));
        std::ptr::dangling_mut()
    }

    unsafe extern "C" fn fake_poll_cq(_cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        // SAFETY: the caller passes room for `n` >= 1 entries.
        unsafe { (*wc).wr_id = 77 };
        n.min(1)
    }

    /// A zeroed verbs_context in Rust memory, with the ops the inline verbs dispatch to,
    /// checks that the re-implemented inline functions find them where the C macros do.
    #[test]
    fn inline_verbs_dispatch_through_the_mirrored_tables() {
        // SAFETY: all-zero is a valid bit pattern for every member (NULL pointers,
        // `None` function pointers, zero integers, an all-zero pthread mutex/cond).
        let mut vctx: Box<verbs_context> = Box::new(unsafe { MaybeUninit::zeroed().assume_init() });
        vctx.ibv_create_flow = Some(fake_create_flow);
        vctx.context.ops.poll_cq = Some(fake_poll_cq);
        let ctx: *mut ibv_context = &mut vctx.context;
        // SAFETY: as above.
        let mut qp: ibv_qp = unsafe { MaybeUninit::zeroed().assume_init() };
        qp.context = ctx;
        // SAFETY: as above.
        let mut cq: ibv_cq = unsafe { MaybeUninit::zeroed().assume_init() };
        cq.context = ctx;
        let mut attr = ibv_flow_attr::default();

        // Not extended: EOPNOTSUPP, as the header does.
        // SAFETY: qp/ctx point at live test structures.
        let f = unsafe { ibv_create_flow(&mut qp, &mut attr) };
        assert!(f.is_null());
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );

        // Extended, but `sz` too small to reach the op: still refused.
        // SAFETY: writes to our own test structure.
        unsafe { (*ctx).abi_compat = VERBS_ABI_IS_EXTENDED };
        vctx.sz =
            std::mem::size_of::<verbs_context>() - offset_of!(verbs_context, ibv_create_flow) - 1;
        // SAFETY: as above.
        assert!(unsafe { ibv_create_flow(&mut qp, &mut attr) }.is_null());
        assert_eq!(CALLS.with(Cell::get), 0);

        vctx.sz = std::mem::size_of::<verbs_context>();
        // SAFETY: as above.
        assert!(!unsafe { ibv_create_flow(&mut qp, &mut attr) }.is_null());
        assert_eq!(CALLS.with(Cell::get), 1);
        // ibv_destroy_flow's slot is NULL: EOPNOTSUPP, no call through NULL.
        let mut flow = ibv_flow {
            comp_mask: 0,
            context: ctx,
            handle: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { ibv_destroy_flow(&mut flow) }, libc::EOPNOTSUPP);

        let mut wc = [ibv_wc::default(); 4];
        // SAFETY: `wc` has room for 4 entries.
        assert_eq!(unsafe { ibv_poll_cq(&mut cq, 4, wc.as_mut_ptr()) }, 1);
        assert_eq!(wc[0].wr_id, 77);
        // post_recv is NULL in this table: ENOSYS rather than a call through NULL.
        let mut bad = std::ptr::null_mut();
        let mut wr = ibv_recv_wr::default();
        // SAFETY: as above.
        assert_eq!(
            unsafe { ibv_post_recv(&mut qp, &mut wr, &mut bad) },
            libc::ENOSYS
        );
    }
}
