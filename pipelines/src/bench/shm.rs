//! `firehose bench shm`: the shared-memory transport between two processes,
//! `fhshmsink → fhshmsrc` against stock `shmsink → shmsrc` (gstreamer1.0-plugins-bad),
//! per buffer size: throughput, buffers/s, CPU per GB on each side, and stalls.
//!
//! Each run is two `firehose launch` children: a producer `fakesrc filltype=zero` (its
//! memory is not shared, so both sinks copy each buffer once) and a consumer that stops
//! after the buffers sent (`identity eos-after`: `shmsrc` never receives an end-of-stream).
//! A run whose consumer has not got its buffers within `--timeout` is a stall. CPU comes
//! from each child's `wait4` resource usage.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

/// `firehose bench shm` options.
#[derive(Debug, Args)]
pub struct ShmArgs {
    /// Buffer sizes in bytes (SI suffixes allowed), comma separated
    #[arg(long, value_delimiter = ',', value_parser = super::parse_bytes,
          default_value = "1472,65536,1048576,8388608")]
    sizes: Vec<u64>,
    /// Runs per transport and size (the table shows medians)
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// Seconds a run may take before it counts as a stall
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
}

/// One run's outcome.
struct Run {
    wall: f64,
    producer_cpu: f64,
    consumer_cpu: f64,
    stalled: bool,
}

/// Buffers per run: enough bytes that the processes' start is a small part of a run.
fn count(size: u64) -> u64 {
    match size {
        0..=4095 => 200_000,
        4096..=262_143 => (2u64 << 30) / size,
        _ => ((8u64 << 30) / size).max(16),
    }
}

fn spawn(pipeline: &str) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["launch", "-q", pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Waits for `child` until `deadline` (then kills it): (exited by itself with success,
/// CPU seconds).
fn reap(child: &mut Child, deadline: Instant) -> (bool, f64) {
    let pid = child.id() as libc::pid_t;
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child; `status` and `ru` are live.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
            let ok = !killed && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            return (ok, t(ru.ru_utime) + t(ru.ru_stime));
        }
        if r < 0 {
            return (false, 0.0);
        }
        if !killed && Instant::now() > deadline {
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_once(stock: bool, size: u64, n: u64, timeout: f64) -> Result<Run, String> {
    let dir = std::env::temp_dir().join(format!("firehose-bench-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let sock = dir.join("s.sock");
    let _ = std::fs::remove_file(&sock);
    let sock = sock.display();
    let (sink, src) = if stock {
        (
            format!(
                "shmsink socket-path={sock} wait-for-connection=true shm-size={} sync=false",
                size * 8 + 65536
            ),
            format!("shmsrc socket-path={sock} is-live=true"),
        )
    } else {
        (
            format!("fhshmsink socket-path={sock} wait-for-connection=true"),
            format!("fhshmsrc socket-path={sock}"),
        )
    };
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(timeout);
    let mut producer = spawn(&format!(
        "fakesrc num-buffers={n} sizetype=fixed sizemax={size} filltype=zero ! {sink}"
    ))
    .map_err(|e| e.to_string())?;
    while !std::path::Path::new(&sock.to_string()).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut consumer = spawn(&format!(
        "{src} ! identity eos-after={n} ! fakesink sync=false"
    ))
    .map_err(|e| e.to_string())?;
    let (ok, consumer_cpu) = reap(&mut consumer, deadline);
    let wall = start.elapsed().as_secs_f64();
    // shmsink ends with an error once its consumer leaves; fhshmsink after its EOS.
    let (_, producer_cpu) = reap(&mut producer, Instant::now() + Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Run {
        wall,
        producer_cpu,
        consumer_cpu,
        stalled: !ok,
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[(v.len() - 1) / 2])
}

/// Runs the benchmark; prints one line per run, then a markdown table of medians.
pub fn shm(a: ShmArgs) -> i32 {
    let stock = gst::ElementFactory::find("shmsink").is_some();
    if !stock {
        eprintln!(
            "firehose: stock shmsink is not installed (apt-get install \
             gstreamer1.0-plugins-bad): measuring fhshmsink alone"
        );
    }
    let mut table = Vec::new();
    for &size in &a.sizes {
        let n = count(size);
        let gb = (size * n) as f64 / 1e9;
        for is_stock in [false, true] {
            if is_stock && !stock {
                continue;
            }
            let name = if is_stock {
                "shmsink → shmsrc"
            } else {
                "fhshmsink → fhshmsrc"
            };
            let (mut rates, mut bufs, mut pcpu, mut ccpu, mut stalls) =
                (vec![], vec![], vec![], vec![], 0);
            for r in 1..=a.repeats {
                let run = match run_once(is_stock, size, n, a.timeout) {
                    Ok(run) => run,
                    Err(e) => {
                        eprintln!("firehose: cannot run {name}: {e}");
                        return crate::launch::EXIT_ERROR;
                    }
                };
                println!(
                    "{name} {size} B × {n}, run {r}: {:.3} s, producer {:.2} s CPU, consumer \
                     {:.2} s CPU{}",
                    run.wall,
                    run.producer_cpu,
                    run.consumer_cpu,
                    if run.stalled { ", STALLED" } else { "" }
                );
                if run.stalled {
                    stalls += 1;
                    continue;
                }
                rates.push(gb / run.wall);
                bufs.push(n as f64 / run.wall);
                pcpu.push(run.producer_cpu / gb);
                ccpu.push(run.consumer_cpu / gb);
            }
            let f = |v: Option<f64>, p: usize| v.map_or("–".into(), |x| format!("{x:.p$}"));
            table.push(format!(
                "| {name} | {size} | {} | {} | {} | {} | {stalls}/{} |",
                f(median(rates), 2),
                f(median(bufs), 0),
                f(median(pcpu), 3),
                f(median(ccpu), 3),
                a.repeats
            ));
        }
    }
    println!();
    println!(
        "| transport | buffer bytes | GB/s | buffers/s | producer CPU s/GB | consumer CPU \
         s/GB | stalls |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in table {
        println!("{row}");
    }
    crate::launch::EXIT_OK
}
