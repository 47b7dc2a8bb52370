//! `firehose tune`: checks the host for line-rate capture (`--check`) and makes the
//! changes that are safe at run time (`--apply`).
//!
//! Every rule is in [`checks`]; they read the kernel's files through [`host::Host`]
//! (under `--root`, a fake tree in tests) and the NIC through [`ethtool`]. With
//! `--pipeline "…"` the thresholds come from the pipeline's own properties ([`needs`]).

pub mod checks;
pub mod ethtool;
pub mod host;
pub mod needs;

use std::io::{BufRead, Write};
use std::path::PathBuf;

use checks::{Action, Ctx, Finding, Status};
use ethtool::{Ethtool, Nic, NoNic};
use host::Host;

use crate::launch::{EXIT_ERROR, EXIT_USAGE};

/// Environment variable naming the root directory (as `--root`), for tests.
pub const ROOT_ENV: &str = "FIREHOSE_TUNE_ROOT";

/// Options of `firehose tune`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["check", "apply"]))]
pub struct TuneArgs {
    /// Check the host and report ok / warn / fail per item with the fixing command;
    /// exit 1 when something fails
    #[arg(long)]
    pub check: bool,
    /// Make the changes that are safe at run time (sysctls, hugepages, governor, idle
    /// states, ring sizes, IRQ affinity) after showing them and asking
    #[arg(long)]
    pub apply: bool,
    /// Apply without asking
    #[arg(long, requires = "apply")]
    pub yes: bool,
    /// The capture interface (NIC checks, IRQs, MTU, NUMA node); only this interface
    /// is ever changed
    #[arg(short, long, value_name = "IF")]
    pub interface: Option<String>,
    /// Take the thresholds (buffer sizes, pools, packet sizes, multicast groups, ports)
    /// from this pipeline's properties
    #[arg(short, long, value_name = "DESCRIPTION")]
    pub pipeline: Option<String>,
    /// The CPU the capture thread runs on (isolation, IRQs kept off it, its NUMA node);
    /// without it, the `cpu` a source of --pipeline is pinned to
    #[arg(long, value_name = "N")]
    pub cpu: Option<u32>,
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
    /// Read the host's files under DIR instead of / (tests)
    #[arg(long, hide = true, value_name = "DIR", env = ROOT_ENV)]
    pub root: Option<PathBuf>,
}

/// Runs `firehose tune`; returns the exit status.
pub fn run(a: TuneArgs) -> i32 {
    let host = Host::new(a.root.clone().unwrap_or_else(|| PathBuf::from("/")));
    let nic: Box<dyn Nic> = if host.is_live() {
        Box::new(Ethtool)
    } else {
        Box::new(NoNic)
    };
    let needs = match &a.pipeline {
        Some(desc) => match crate::session::parse(desc) {
            Ok(p) => Some(needs::of_pipeline(&p)),
            Err(e) => {
                eprintln!("firehose: could not build the pipeline: {e}\n  pipeline: {desc}");
                return EXIT_USAGE;
            }
        },
        None => None,
    };
    let iface = a
        .interface
        .clone()
        .or_else(|| needs.as_ref().and_then(|n| n.interfaces.first().cloned()));
    if let Some(i) = &iface {
        if !host.exists(&format!("/sys/class/net/{i}")) {
            eprintln!(
                "firehose: no interface '{i}' (not in /sys/class/net); the interfaces are: {}",
                host.list("/sys/class/net").join(", ")
            );
            return EXIT_USAGE;
        }
    }
    // The CPU a source is pinned to, unless --cpu names one (the first source's when
    // several are pinned: each is checked as the capture CPU in its own run).
    let cpu = a
        .cpu
        .or_else(|| needs.as_ref().and_then(|n| n.cpus.first().copied()));
    let ctx = Ctx {
        host: &host,
        nic: nic.as_ref(),
        iface,
        needs,
        cpu,
    };
    let findings = checks::run_all(&ctx);
    if a.apply {
        return apply(&ctx, &findings, a.yes, a.json);
    }
    if a.json {
        println!("{}", to_json(&findings));
    } else {
        print!("{}", report(&ctx, &findings));
    }
    exit_status(&findings)
}

/// 1 when any check failed, else 0.
pub fn exit_status(findings: &[Finding]) -> i32 {
    if findings.iter().any(|f| f.status == Status::Fail) {
        EXIT_ERROR
    } else {
        0
    }
}

/// The human report: one block per finding, then a count.
pub fn report(ctx: &Ctx, findings: &[Finding]) -> String {
    let mut out = String::new();
    if let Some(n) = &ctx.needs {
        out.push_str(&format!(
            "thresholds from the pipeline ({})\n",
            if n.from.is_empty() {
                "no element asks for anything".to_string()
            } else {
                n.from.join(", ")
            }
        ));
    }
    for f in findings {
        out.push_str(&format!(
            "[{:>4}] {:<15} found: {}\n",
            f.status.word(),
            f.check,
            f.found
        ));
        if !f.wanted.is_empty() && f.status != Status::Skip {
            out.push_str(&format!("       {:<15} wanted: {}\n", "", f.wanted));
        }
        if f.status >= Status::Warn {
            out.push_str(&format!("       {:<15} why: {}\n", "", f.why));
            if !f.fix.is_empty() {
                out.push_str(&format!("       {:<15} fix: {}\n", "", f.fix));
            }
        }
    }
    let count = |s| findings.iter().filter(|f| f.status == s).count();
    out.push_str(&format!(
        "{} ok, {} warn, {} fail, {} not checked{}\n",
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Skip),
        if findings.iter().any(|f| !f.actions.is_empty()) {
            "; `firehose tune --apply` makes the run-time changes"
        } else {
            ""
        }
    ));
    out
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The findings as a JSON array of objects (check, status, found, wanted, fix, why,
/// persist, applicable).
pub fn to_json(findings: &[Finding]) -> String {
    let items: Vec<String> = findings
        .iter()
        .map(|f| {
            format!(
                "{{\"check\":{},\"status\":{},\"found\":{},\"wanted\":{},\"fix\":{},\"why\":{},\"persist\":{},\"applicable\":{}}}",
                json_str(f.check),
                json_str(f.status.word()),
                json_str(&f.found),
                json_str(&f.wanted),
                json_str(&f.fix),
                json_str(f.why),
                json_str(&f.persist),
                !f.actions.is_empty()
            )
        })
        .collect();
    format!("[{}]", items.join(",\n "))
}

fn describe(a: &Action) -> String {
    match a {
        Action::Write { path, value } => format!("write {value} to {path}"),
        Action::Rings { ifname, rx, tx } => {
            format!("set {ifname} rings to rx {rx} tx {tx} (ethtool ioctl)")
        }
    }
}

/// Shows the run-time changes, asks (unless `yes`), makes them, prints how to make them
/// persistent, and checks again.
fn apply(ctx: &Ctx, findings: &[Finding], yes: bool, json: bool) -> i32 {
    let todo: Vec<&Finding> = findings.iter().filter(|f| !f.actions.is_empty()).collect();
    if todo.is_empty() {
        println!("nothing to change at run time");
        print!("{}", report(ctx, findings));
        return exit_status(findings);
    }
    println!("firehose tune --apply will:");
    for f in &todo {
        for a in &f.actions {
            println!("  [{}] {}", f.check, describe(a));
        }
    }
    if !yes {
        print!("apply these changes? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing changed");
            return EXIT_ERROR;
        }
    }
    let mut failed = 0;
    for f in &todo {
        for a in &f.actions {
            let r = match a {
                Action::Write { path, value } => ctx.host.write(path, value),
                Action::Rings { ifname, rx, tx } => {
                    // Only ever the interface the user named (or the pipeline's).
                    if Some(ifname) != ctx.iface.as_ref() {
                        continue;
                    }
                    ctx.nic.set_rings(ifname, *rx, *tx)
                }
            };
            match r {
                Ok(()) => println!("  done: {}", describe(a)),
                Err(e) => {
                    failed += 1;
                    println!("  FAILED: {}: {e}", describe(a));
                }
            }
        }
    }
    println!("\nto keep these after a reboot:");
    for f in &todo {
        if !f.persist.is_empty() {
            println!("  [{}] {}", f.check, f.persist);
        }
    }
    println!("\nafter the changes:");
    let again = checks::run_all(ctx);
    if json {
        println!("{}", to_json(&again));
    } else {
        print!("{}", report(ctx, &again));
    }
    if failed > 0 {
        EXIT_ERROR
    } else {
        exit_status(&again)
    }
}

#[cfg(test)]
mod tests;
