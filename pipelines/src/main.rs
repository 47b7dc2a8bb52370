//! The `firehose` command: run Firehose GStreamer pipelines with live statistics
//! (`launch`, with `--metrics` for Prometheus), check a loopback capture end to end
//! (`demo`), compare receivers and writers (`bench`), check or tune the host
//! (`tune`), and check or repair a recording a crash left behind (`record`). The
//! Firehose elements are registered statically, so no
//! GST_PLUGIN_PATH is needed.

mod args;
mod bench;
mod cpulimit;
mod demo;
mod generate;
mod launch;
mod pipelinefile;
mod plot;
mod record;
mod session;
mod signals;
mod statsline;
mod sys;
mod tune;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use args::{parse_rate, parse_seconds};
use launch::{EXIT_ERROR, EXIT_USAGE};

/// firehose — run Firehose GStreamer pipelines at line rate
#[derive(Debug, Parser)]
#[command(name = "firehose", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a gst-launch style pipeline (Firehose and stock elements) with a statistics
    /// line every second on stderr and a summary on stdout at the end. Ctrl-C or SIGTERM
    /// sends EOS and waits for it (Ctrl-C again stops at once). Exit status: 0 end of
    /// stream or stopped by a signal, 1 element error, 2 bad usage or a pipeline that
    /// does not parse.
    Launch(LaunchArgs),
    /// fhtestsrc ! fhudpsink sends verifiable packets over 127.0.0.1 to fhudpsrc !
    /// fhcheck; exits 0 only if nothing was lost, duplicated, corrupted or dropped.
    Demo(DemoArgs),
    /// Measure receivers and writers side by side, each against its peer and the
    /// physical floor; prints a markdown report (and SVG charts with --plot or --out).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Check the host for line-rate capture (--check: ok / warn / fail per item with the
    /// command that fixes it; exit 1 when something fails) or make the safe run-time
    /// changes (--apply)
    Tune(tune::TuneArgs),
    /// Check a pcap, pcapng or raw recording a crash left behind (`check`), or keep only
    /// its whole records (`repair`)
    #[command(subcommand)]
    Record(record::RecordCommand),
    /// Man pages and shell completions, generated from this command's own definitions
    /// (what `scripts/setup install` and the Debian package install)
    #[command(subcommand)]
    Generate(generate::GenerateCommand),
    /// One benchmark receiver in its own process (used by `bench`).
    #[command(hide = true)]
    BenchRecv(bench::receiver::RecvConfig),
    /// A receiver or sender of `bench hostile` in its own process.
    #[command(hide = true, subcommand)]
    BenchHostile(bench::hostile::ChildCommand),
}

#[derive(Debug, clap::Args)]
struct LaunchArgs {
    /// Read the pipeline from FILE: '#' lines are comments, newlines are spaces,
    /// ${KEY} and ${KEY:-default} take KEY=VALUE arguments
    #[arg(short, long, value_name = "FILE.pipeline")]
    file: Option<PathBuf>,
    /// No live statistics line
    #[arg(short, long)]
    quiet: bool,
    /// Seconds to wait for EOS after Ctrl-C before stopping
    #[arg(long, default_value = "5", value_parser = parse_seconds)]
    eos_timeout: f64,
    /// Build the pipeline, print its description and exit
    #[arg(long)]
    dry_run: bool,
    /// Serve every element's counters for Prometheus on ADDR:PORT (`GET /metrics`,
    /// OpenMetrics text). A bare PORT listens on 127.0.0.1 only; 0 picks a free port
    #[arg(long, value_name = "ADDR:PORT", value_parser = firehose_metrics::http::parse_addr)]
    metrics: Option<std::net::SocketAddr>,
    /// The pipeline description (unquoted words are joined, as with gst-launch), or
    /// with -f the KEY=VALUE arguments. Words after the first are never taken as
    /// options, so property values may start with '-'.
    #[arg(
        trailing_var_arg = true,
        value_name = "PIPELINE DESCRIPTION | KEY=VALUE"
    )]
    words: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// How long to send, seconds
    #[arg(long, default_value = "3", value_parser = parse_seconds)]
    seconds: f64,
    /// Offered rate in bits/s, SI suffixes allowed
    #[arg(long, default_value = "200M", value_parser = parse_rate)]
    rate: u64,
}

fn init() -> Result<(), String> {
    gst::init().map_err(|e| format!("cannot initialise GStreamer: {e}"))?;
    gstfirehose::register_static()
        .map_err(|e| format!("cannot register the Firehose elements: {e}"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; real usage errors exit 2.
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    if let Command::Generate(g) = cli.command {
        // No GStreamer needed to describe the command line.
        use clap::CommandFactory;
        return ExitCode::from(generate::run(g, Cli::command()) as u8);
    }
    if let Err(e) = init() {
        eprintln!("firehose: {e}");
        return ExitCode::from(EXIT_ERROR as u8);
    }
    let status = match cli.command {
        Command::Launch(a) => cmd_launch(a),
        Command::Demo(a) => demo::run(&demo::DemoOptions {
            seconds: a.seconds,
            rate: a.rate,
        }),
        Command::Bench(b) => bench::run(b),
        Command::BenchRecv(cfg) => bench::receiver::run_child(&cfg),
        Command::Tune(a) => tune::run(a),
        Command::Record(c) => record::run(c),
        Command::Generate(_) => unreachable!("handled before GStreamer starts"),
        Command::BenchHostile(c) => bench::hostile::run_child(c),
    };
    ExitCode::from(status as u8)
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("firehose: {msg}\n\nRun 'firehose launch --help' for the options.");
    EXIT_USAGE
}

fn cmd_launch(a: LaunchArgs) -> i32 {
    let opts = launch::LaunchOptions {
        quiet: a.quiet,
        eos_timeout: Duration::from_secs_f64(a.eos_timeout),
        metrics: a.metrics,
    };
    let description = match a.file {
        Some(path) => {
            let vars = match pipelinefile::parse_assignments(&a.words) {
                Ok(v) => v,
                Err(e) => return usage_error(&e),
            };
            match pipelinefile::load(&path, &vars) {
                Ok(filled) => {
                    for key in &filled.unused {
                        eprintln!(
                            "firehose: warning: {key} is not used by {} (typo?)",
                            path.display()
                        );
                    }
                    filled.description
                }
                Err(e) => {
                    eprintln!("firehose: {e}");
                    return EXIT_USAGE;
                }
            }
        }
        None if a.words.is_empty() => {
            return usage_error("launch needs a pipeline description or -f FILE")
        }
        // As with gst-launch, unquoted words ("fakesrc ! fakesink") are joined.
        None => a.words.join(" "),
    };
    if a.dry_run {
        return match session::parse(&description) {
            Ok(_) => {
                println!("{description}");
                0
            }
            Err(e) => {
                eprintln!("firehose: could not build the pipeline: {e}");
                eprintln!("  pipeline: {description}");
                EXIT_USAGE
            }
        };
    }
    launch::run(&description, &opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn launch_words_after_the_first_are_never_options() {
        let cli = Cli::try_parse_from([
            "firehose",
            "launch",
            "-q",
            "fakesrc",
            "num-buffers=1",
            "!",
            "fakesink",
            "-x",
        ])
        .unwrap();
        let Command::Launch(a) = cli.command else {
            panic!("launch")
        };
        assert!(a.quiet);
        assert_eq!(a.words.join(" "), "fakesrc num-buffers=1 ! fakesink -x");
        assert!(Cli::try_parse_from(["firehose", "launch", "--bogus", "x"]).is_err());
    }

    #[test]
    fn bench_options_parse() {
        let cli = Cli::try_parse_from([
            "firehose",
            "bench",
            "spead",
            "--sizes",
            "1472",
            "--rates",
            "1G,2G",
            "--receivers",
            "floor,spead2,xdp-chunk",
            "--link",
            "veth",
            "--gso",
        ])
        .unwrap();
        let Command::Bench(bench::BenchCommand::Spead(_)) = cli.command else {
            panic!("bench spead")
        };
        let e = Cli::try_parse_from(["firehose", "bench", "udp", "--sizes", "99999"]).unwrap_err();
        assert!(e.to_string().contains("65507"), "{e}");
        let e = Cli::try_parse_from(["firehose", "bench", "tcp"]).unwrap_err();
        assert!(e.to_string().contains("tcp"), "{e}");
    }
}
