//! `firehose bench gpu`: host-to-device throughput of `fhcudaupload` against a raw
//! pinned `cuMemcpyHtoDAsync` loop of the same sizes and the same number of copies in
//! flight ([`firehose_cuda::rawloop`]), in one run.
//!
//! The element is fed from this process through a pad linked to its sink, with buffers
//! cut from the pinned memory it proposes in the allocation query (what a source that
//! takes the proposal, such as fhudpsrc or fhudpchunksrc, hands it), so both sides copy
//! from pinned memory and the ratio is the element's own cost. Time runs from the first
//! buffer pushed to the EOS at the sink. Without the CUDA driver the benchmark stops at
//! once with the element's error, which says what is missing.
//!
//! Not done yet: the end-to-end rate of `fhudpchunksrc ! fhcudaupload` against
//! `fhudpchunksrc ! fakesink`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use firehose_core::alloc::{proposed_provider, Proposal};
use firehose_core::{HugepagePolicy, PoolConfig, SlotPool};
use gst::prelude::*;

use crate::launch::{EXIT_ERROR, EXIT_OK};

/// Arguments of `firehose bench gpu`.
#[derive(Debug, Args)]
pub struct GpuArgs {
    /// Buffer sizes, binary suffixes (K = 1024)
    #[arg(long, value_delimiter = ',', value_parser = parse_binary,
          default_value = "64K,256K,1M,4M,16M,64M")]
    sizes: Vec<usize>,
    /// Bytes copied per size and side (at least 16 copies)
    #[arg(long, value_parser = parse_binary, default_value = "2G")]
    bytes: usize,
    /// Copies in flight (fhcudaupload's max-in-flight, and the raw loop's)
    #[arg(long, default_value_t = 4)]
    in_flight: usize,
    /// CUDA device index
    #[arg(long, default_value_t = 0)]
    device: i32,
    /// Runs per side and size; figures are medians
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Also write the markdown report to this file
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Parses "64K", "1M", "2G" or a plain number of bytes, with binary multiples.
fn parse_binary(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1usize << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: usize = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 64K, 1M, 2G)"))?;
    v.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("'{s}' is out of range"))
}

/// Runs the benchmark; returns the exit status.
pub fn run(a: GpuArgs) -> i32 {
    if let Err(e) = gst::init() {
        eprintln!("firehose bench gpu: {e}");
        return EXIT_ERROR;
    }
    let _ = gstfirehose::register_static();
    let cuda = match firehose_cuda::driver::Cuda::open(a.device) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("firehose bench gpu: {e}");
            return EXIT_ERROR;
        }
    };
    let info = cuda.info().clone();
    let backend: Arc<dyn firehose_cuda::engine::Backend> = cuda.clone();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "## fhcudaupload against a raw pinned cuMemcpyHtoDAsync loop\n\n\
         Device {} ({}, driver API {}.{}), {} copies in flight, {} MiB per size and side, \
         medians of {} runs.\n\nCommand: `{}`\n\n\
         | size | raw loop GB/s | fhcudaupload GB/s | ratio |\n|---|---|---|---|",
        info.index,
        info.name,
        info.driver_version / 1000,
        info.driver_version % 1000 / 10,
        a.in_flight,
        a.bytes >> 20,
        a.repeat,
        super::command_line()
    );
    println!("{}", report.trim_end());
    for &size in &a.sizes {
        let copies = (a.bytes / size).max(16);
        let mut raw = Vec::new();
        let mut element = Vec::new();
        for _ in 0..a.repeat.max(1) {
            match firehose_cuda::rawloop::raw_h2d(
                &backend,
                cuda.registrar(),
                size,
                copies,
                a.in_flight,
            ) {
                Ok(r) => raw.push(r.bytes_per_sec()),
                Err(e) => {
                    eprintln!("firehose bench gpu: raw loop, {size} bytes: {e}");
                    return EXIT_ERROR;
                }
            }
            match upload_run(&a, size, copies) {
                Ok(bps) => element.push(bps),
                Err(e) => {
                    eprintln!("firehose bench gpu: fhcudaupload, {size} bytes: {e}");
                    return EXIT_ERROR;
                }
            }
        }
        let (r, e) = (median(&mut raw), median(&mut element));
        let line = format!(
            "| {} | {:.2} | {:.2} | {:.0} % |",
            human(size),
            r / 1e9,
            e / 1e9,
            100.0 * e / r.max(1.0)
        );
        println!("{line}");
        let _ = writeln!(report, "{line}");
    }
    if let Some(out) = &a.out {
        if let Err(e) = std::fs::write(out, &report) {
            eprintln!("firehose bench gpu: writing {}: {e}", out.display());
            return EXIT_ERROR;
        }
    }
    EXIT_OK
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn human(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// Pushes `copies` buffers of `size` bytes of the pinned memory fhcudaupload proposes
/// through it into a fakesink; bytes per second from the first push to the EOS.
fn upload_run(a: &GpuArgs, size: usize, copies: usize) -> Result<f64, String> {
    let pipeline = gst::Pipeline::new();
    let up = gst::ElementFactory::make("fhcudaupload")
        .property("device", a.device)
        .property("max-in-flight", a.in_flight as u32)
        .property("stats-interval", 0u32)
        .build()
        .map_err(|e| e.to_string())?;
    let sink = gst::ElementFactory::make("fakesink")
        .property("sync", false)
        .property("enable-last-sample", false)
        .build()
        .map_err(|e| e.to_string())?;
    pipeline.add_many([&up, &sink]).map_err(|e| e.to_string())?;
    up.link(&sink).map_err(|e| e.to_string())?;
    let src = gst::Pad::builder(gst::PadDirection::Src)
        .name("bench")
        .build();
    src.set_active(true).map_err(|e| e.to_string())?;
    src.link(&up.static_pad("sink").expect("fhcudaupload has a sink pad"))
        .map_err(|e| format!("{e:?}"))?;
    let bus = pipeline.bus().expect("a pipeline has a bus");
    let stop = |p: &gst::Pipeline| {
        let _ = p.set_state(gst::State::Null);
    };
    if pipeline.set_state(gst::State::Playing).is_err() {
        let msg = bus
            .timed_pop_filtered(gst::ClockTime::from_seconds(1), &[gst::MessageType::Error])
            .and_then(|m| match m.view() {
                gst::MessageView::Error(e) => Some(e.error().to_string()),
                _ => None,
            });
        stop(&pipeline);
        return Err(msg.unwrap_or_else(|| "the pipeline did not start".into()));
    }
    src.push_event(gst::event::StreamStart::new("firehose-bench-gpu"));
    src.push_event(gst::event::Caps::new(&gst::Caps::new_empty_simple(
        "application/octet-stream",
    )));
    src.push_event(gst::event::Segment::new(&gst::FormattedSegment::<
        gst::ClockTime,
    >::new()));
    let caps = gst::Caps::new_empty_simple("application/octet-stream");
    let mut q = gst::query::Allocation::new(Some(&caps), true);
    if !src.peer_query(&mut q) {
        stop(&pipeline);
        return Err("fhcudaupload did not answer the allocation query".into());
    }
    let Proposal::Provider(provider) = proposed_provider(&q) else {
        stop(&pipeline);
        return Err("fhcudaupload proposed no pinned memory".into());
    };
    let pool = SlotPool::with_provider(
        &PoolConfig {
            slot_size: size,
            slots: a.in_flight + 2,
            hugepages: HugepagePolicy::Off,
        },
        &*provider,
    )
    .map_err(|e| e.to_string())?;
    let cancel = AtomicBool::new(false);
    let t0 = Instant::now();
    for _ in 0..copies {
        let Some(mut slot) = pool.acquire_blocking(&cancel, Duration::from_millis(100)) else {
            stop(&pipeline);
            return Err("no pinned slot came back".into());
        };
        slot.set_len(size);
        if let Err(e) = src.push(firehose_core::gstmem::slot_into_buffer(slot)) {
            stop(&pipeline);
            return Err(format!("push failed: {e:?}"));
        }
    }
    src.push_event(gst::event::Eos::new());
    let end = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(600),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let elapsed = t0.elapsed();
    stop(&pipeline);
    match end.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Eos(_)) => Ok((size * copies) as f64 / elapsed.as_secs_f64()),
        Some(gst::MessageView::Error(e)) => Err(e.error().to_string()),
        _ => Err("no EOS within 600 s".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary() {
        assert_eq!(parse_binary("64K"), Ok(64 << 10));
        assert_eq!(parse_binary("1M"), Ok(1 << 20));
        assert_eq!(parse_binary("2G"), Ok(2 << 30));
        assert_eq!(parse_binary("100"), Ok(100));
        assert!(parse_binary("0").is_err());
        assert!(parse_binary("x").is_err());
    }
}
