//! `firehose record check` and `firehose record repair`: what a recording a crash left
//! behind holds, and cutting it at its last whole record
//! (`firehose_record::read::salvage` does the work; this is the command line).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use firehose_record::read::salvage::{self, Scan, Tail};

use crate::launch::{EXIT_ERROR, EXIT_OK};

/// The `record` subcommands.
#[derive(Debug, Subcommand)]
pub enum RecordCommand {
    /// Report what a pcap, pcapng or raw recording (its data file or its .idx) holds:
    /// its whole records, and what follows the last of them (a record cut short, space
    /// never written, damage). Exit status 0 when every file holds only whole records,
    /// 1 when one holds more (repair would cut it), cannot be read, or is still being
    /// written by another process
    Check {
        /// Files to check
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Keep only a recording's whole records: copied to NAME.repaired.EXT (with its
    /// .idx for raw; an existing file is never replaced), or with --in-place by cutting
    /// the file itself, which also releases disk space a killed recording left reserved.
    /// Refuses a file another process still has open for writing. Exit status 0 when
    /// every file was whole or repaired, 1 otherwise
    Repair {
        /// Cut the file (and its index) itself instead of writing a repaired copy
        #[arg(long)]
        in_place: bool,
        /// Files to repair
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// Runs a `record` subcommand; returns the exit status.
pub fn run(cmd: RecordCommand) -> i32 {
    let (files, action) = match cmd {
        RecordCommand::Check { files } => (files, None),
        RecordCommand::Repair { in_place, files } => (files, Some(in_place)),
    };
    let mut status = EXIT_OK;
    for f in &files {
        match one(f, action) {
            Ok(true) => {}
            Ok(false) => status = EXIT_ERROR,
            Err(e) => {
                eprintln!("firehose: {}: {e}", f.display());
                status = EXIT_ERROR;
            }
        }
    }
    status
}

/// Checks (and with `repair` = `Some(in_place)` repairs) one file; `Ok(true)` when it
/// is whole or was repaired.
fn one(path: &Path, repair: Option<bool>) -> Result<bool, String> {
    // Before reading anything: a file still being written would only look cut short.
    let data = salvage::data_path(path);
    let index = salvage::index_path(&data);
    for p in std::iter::once(&data).chain(index.exists().then_some(&index)) {
        if let Some(who) = salvage::open_for_writing_by(p).map_err(|e| e.to_string())? {
            return Err(format!(
                "{} is open for writing by {who}: it is still being recorded. Check or repair it once that recording has stopped",
                p.display()
            ));
        }
    }
    let s = salvage::scan(path).map_err(|e| e.to_string())?;
    print!("{}", report(&s));
    let Some(in_place) = repair else {
        return Ok(s.is_whole());
    };
    if s.is_whole() && !(in_place && s.reserved > 0) {
        println!("  nothing to repair");
        return Ok(true);
    }
    let r = salvage::repair(&s, in_place).map_err(|e| format!("repair failed: {e}"))?;
    let index = r
        .index
        .as_ref()
        .map(|i| format!(" and {}", i.display()))
        .unwrap_or_default();
    if in_place {
        println!(
            "  repaired in place: {}{index} cut to its {} whole records ({} bytes)",
            r.data.display(),
            s.records,
            s.keep
        );
    } else {
        println!(
            "  repaired: {} whole records ({} bytes) written to {}{index}; {} is unchanged",
            s.records,
            s.keep,
            r.data.display(),
            s.path.display()
        );
    }
    Ok(true)
}

/// The human-readable report of a scan.
fn report(s: &Scan) -> String {
    let mut out = format!(
        "{}: {}, {} bytes\n",
        s.path.display(),
        s.format.name(),
        s.size
    );
    if let Some(i) = &s.index {
        out += &format!(
            "  index: {}, {} bytes, {} entries, {} of them for whole records\n",
            i.path.display(),
            i.size,
            i.entries,
            i.kept
        );
    }
    out += &format!(
        "  records: {} whole, in the first {} bytes\n",
        s.records, s.keep
    );
    let after = match &s.tail {
        Tail::Clean => "nothing (the file ends with its last whole record)".to_string(),
        Tail::Truncated { need, have } => {
            format!("a record cut short by the end of the file ({have} of its {need} bytes)")
        }
        Tail::Unwritten { zeros, data_after } => {
            let mut t = format!(
                "{zeros} bytes of space never written (zeros, as an older version killed with writes in flight left)"
            );
            if *data_after > 0 {
                t += &format!(
                    ", then {data_after} bytes of data that cannot be framed after them"
                );
            }
            if s.dropped_last {
                t += "; the last record that framed runs into those zeros from a 4096-byte boundary and is not counted as whole";
            }
            t
        }
        Tail::Damaged { what } => format!("damage: {what}"),
        Tail::Unindexed { bytes } => format!(
            "{bytes} bytes of data with no index entry (the index is behind the data; raw data has no framing of its own)"
        ),
    };
    out += &format!("  after them: {after}\n");
    if let Some(i) = s.index.as_ref().filter(|i| i.keep < i.size) {
        out += &format!(
            "  index after its whole records: {} bytes\n",
            i.size - i.keep
        );
    }
    if s.reserved > 0 {
        out += &format!(
            "  reserved: {} bytes of disk allocated beyond the end of the file (a killed recording's preallocation); repair --in-place releases them\n",
            s.reserved
        );
    }
    out += &if s.is_whole() {
        "  whole: nothing to cut\n".to_string()
    } else {
        format!(
            "  not whole: `firehose record repair {}` keeps the first {} bytes\n",
            s.path.display(),
            s.keep
        )
    };
    out
}
