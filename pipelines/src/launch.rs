//! `firehose launch`: run a pipeline with a live statistics line until EOS, an error or
//! Ctrl-C, then print a summary.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use firehose_metrics::http::{MetricsServer, Render};
use gst::prelude::*;

use crate::session::{BusEvent, Session};
use crate::signals;

/// Exit status: the pipeline ended normally (EOS, or stopped by a signal).
pub const EXIT_OK: i32 = 0;
/// Exit status: an element posted an error or the pipeline could not start.
pub const EXIT_ERROR: i32 = 1;
/// Exit status: bad usage or a pipeline description that does not parse.
pub const EXIT_USAGE: i32 = 2;

/// How often the main loop wakes to check for signals; bounds Ctrl-C latency.
const TICK: Duration = Duration::from_millis(100);
/// Interval of the live statistics line.
const LINE_INTERVAL: Duration = Duration::from_secs(1);

/// Options of `firehose launch`.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// No live statistics line.
    pub quiet: bool,
    /// How long to wait for EOS after the first Ctrl-C before forcing a stop.
    pub eos_timeout: Duration,
    /// Serve every element's counters for Prometheus at this address while running.
    pub metrics: Option<SocketAddr>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            quiet: false,
            eos_timeout: Duration::from_secs(5),
            metrics: None,
        }
    }
}

/// Parses and runs `description`; returns the process exit status.
pub fn run(description: &str, opts: &LaunchOptions) -> i32 {
    let mut session = match Session::from_description(description) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("firehose: could not build the pipeline: {e}");
            eprintln!("  pipeline: {description}");
            return EXIT_USAGE;
        }
    };
    // Bound before the pipeline starts, so a taken port fails fast and nothing is lost;
    // it lives until the pipeline is stopped, so the last scrape sees the final counts.
    let _metrics = match opts
        .metrics
        .map(|addr| serve_metrics(addr, &session.pipeline))
    {
        Some(Ok(server)) => Some(server),
        Some(Err(e)) => {
            eprintln!("firehose: {e}");
            return EXIT_USAGE;
        }
        None => None,
    };
    if let Err(e) = signals::install() {
        // Without the handler Ctrl-C still stops us, only without the clean EOS.
        eprintln!("firehose: warning: cannot catch Ctrl-C ({e}); it will kill the pipeline");
    }
    if let Err(e) = session.start() {
        eprintln!("{e}");
        session.stop();
        return EXIT_ERROR;
    }
    // Also tells scripts and tests that signals are handled from here on.
    eprintln!("firehose: running; Ctrl-C or SIGTERM stops with EOS");

    let mut next_line = Instant::now() + LINE_INTERVAL;
    let mut eos_requested_at: Option<Instant> = None;
    let (status, reason) = loop {
        match session.poll(TICK) {
            Some(BusEvent::Eos) if eos_requested_at.is_some() => {
                break (EXIT_OK, "interrupted, drained to end of stream".to_string())
            }
            Some(BusEvent::Eos) => break (EXIT_OK, "end of stream".to_string()),
            Some(BusEvent::Error(text)) => {
                eprintln!("{text}");
                break (EXIT_ERROR, "stopped by an error".to_string());
            }
            None => {}
        }
        let now = Instant::now();
        let interrupts = signals::count();
        if interrupts >= 2 {
            break (EXIT_OK, "stopped by a second interrupt, without EOS".into());
        }
        if interrupts == 1 && eos_requested_at.is_none() {
            eprintln!(
                "firehose: interrupt: sending EOS, waiting up to {} s (interrupt again to stop at once)",
                opts.eos_timeout.as_secs_f64()
            );
            session.send_eos();
            eos_requested_at = Some(now);
        }
        if let Some(t) = eos_requested_at {
            if now.saturating_duration_since(t) >= opts.eos_timeout {
                break (
                    EXIT_OK,
                    format!(
                        "stopped: no EOS within {} s of the interrupt",
                        opts.eos_timeout.as_secs_f64()
                    ),
                );
            }
        }
        if now >= next_line {
            session.poll_silent(now);
            if !opts.quiet {
                if let Some(line) = session.board.line(now) {
                    eprintln!("{line}");
                }
            }
            // Skip missed ticks instead of printing a burst after a stall.
            while next_line <= now {
                next_line += LINE_INTERVAL;
            }
        }
    };

    // Final totals come from the properties, which are newer than the last message.
    session.refresh_stats();
    let elapsed = session.elapsed();
    session.stop();
    print_summary(&session, &reason, elapsed);
    status
}

/// Serves the counters of every Firehose element of `pipeline` on `addr`
/// (`GET /metrics`), read from their `stats` properties at each scrape.
pub fn serve_metrics(addr: SocketAddr, pipeline: &gst::Pipeline) -> Result<MetricsServer, String> {
    let bin: gst::Bin = pipeline.clone().upcast();
    let render: Arc<Render> = Arc::new(move |format| {
        firehose_metrics::exposition::encode(&firehose_metrics::collect::snapshot(&bin), format)
    });
    let server = MetricsServer::start(addr, render).map_err(|e| {
        format!("cannot serve metrics on {addr}: {e} (is the port taken? choose another with --metrics ADDR:PORT)")
    })?;
    eprintln!(
        "firehose: metrics at http://{}/metrics",
        server.local_addr()
    );
    Ok(server)
}

/// Prints "firehose: <reason> after N s" and the per-element totals to stdout.
pub fn print_summary(session: &Session, reason: &str, elapsed: Duration) {
    println!("firehose: {reason} after {:.2} s", elapsed.as_secs_f64());
    if session.board.is_empty() {
        println!("  (no Firehose element in the pipeline reported statistics)");
    } else {
        print!("{}", session.board.summary(elapsed));
    }
}
