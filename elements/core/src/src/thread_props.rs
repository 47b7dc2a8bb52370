//! `cpu` and `rt-priority`: where a source's receive thread runs ([`crate::thread`]),
//! one group for every source, applied from the streaming thread by a
//! [`Pinner`](crate::thread::Pinner).

use gst::glib;
use gst::prelude::*;

use crate::thread::{Pinner, Placement, MAX_CPU, MAX_RT_PRIORITY};

/// A source's `cpu` and `rt-priority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSettings {
    /// `cpu`: the CPU to pin the receive thread to; -1: not pinned.
    pub cpu: i32,
    /// `rt-priority`: its `SCHED_FIFO` priority; 0: normal scheduling.
    pub rt_priority: u32,
}

impl Default for ThreadSettings {
    fn default() -> Self {
        Self {
            cpu: -1,
            rt_priority: 0,
        }
    }
}

crate::property_group! {
    ThreadSettings as _s {
        cpu => glib::ParamSpecInt::builder("cpu")
            .nick("Receive CPU")
            .blurb(
                "CPU to pin the receive (streaming) thread to, with sched_setaffinity; \
                 -1: not pinned. Pick one on the NIC's NUMA node whose interrupts \
                 `firehose tune --cpu N` keeps clear",
            )
            .minimum(-1)
            .maximum(MAX_CPU as i32)
            .default_value(-1)
            .mutable_ready()
            .build();
        rt_priority => glib::ParamSpecUInt::builder("rt-priority")
            .nick("Real-time priority")
            .blurb(
                "SCHED_FIFO priority of the receive thread (1-99); 0: normal scheduling. \
                 Needs CAP_SYS_NICE or an RLIMIT_RTPRIO that covers it: refused at the \
                 first batch with an error saying so",
            )
            .maximum(MAX_RT_PRIORITY)
            .default_value(0)
            .mutable_ready()
            .build();
    }
}

impl ThreadSettings {
    /// What to apply.
    pub fn placement(&self) -> Placement {
        Placement {
            cpu: u32::try_from(self.cpu).ok(),
            rt_priority: self.rt_priority,
        }
    }

    /// The pinner for one start: a CPU this process may not use is the start error to
    /// return, naming the CPUs it may (checked before anything opens).
    pub fn pinner(&self) -> Result<Pinner, gst::ErrorMessage> {
        Pinner::start(self.placement())
            .map_err(|e| gst::error_msg!(gst::ResourceError::Settings, ("{}", e)))
    }
}
