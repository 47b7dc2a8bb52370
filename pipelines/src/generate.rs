//! `firehose generate`: man pages and shell completions, generated from the command's
//! own clap definitions, so what `man firehose` and Tab say is what the command takes.
//! `scripts/setup install` and the Debian package install them.

use std::path::{Path, PathBuf};

use clap::{Command, Subcommand};
use clap_complete::Shell;

use crate::launch::{EXIT_ERROR, EXIT_OK};

/// What to generate.
#[derive(Debug, Subcommand)]
pub enum GenerateCommand {
    /// Man pages (section 1) into DIR: firehose.1 and one page per subcommand
    /// (firehose-launch.1, firehose-bench-record.1, …)
    Man {
        /// Directory to write the pages into (created if missing)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// A shell's completion script, on standard output
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: Shell,
    },
}

/// Runs a `generate` subcommand on `cmd` (the whole command line's definition).
pub fn run(what: GenerateCommand, cmd: Command) -> i32 {
    match what {
        GenerateCommand::Man { dir } => match man_pages(cmd, &dir) {
            Ok(n) => {
                eprintln!("firehose: {n} man pages written to {}", dir.display());
                EXIT_OK
            }
            Err(e) => {
                eprintln!(
                    "firehose: cannot write the man pages to {}: {e}",
                    dir.display()
                );
                EXIT_ERROR
            }
        },
        GenerateCommand::Completions { shell } => {
            let mut cmd = cmd;
            clap_complete::generate(shell, &mut cmd, "firehose", &mut std::io::stdout());
            EXIT_OK
        }
    }
}

/// Writes the page of `cmd` and of each of its visible subcommands, recursively;
/// returns how many.
fn man_pages(cmd: Command, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd;
    cmd.build();
    write_pages(&cmd, "firehose", dir)
}

fn write_pages(cmd: &Command, name: &str, dir: &Path) -> std::io::Result<usize> {
    // The page's title is its full name (firehose-bench-record), as man looks it up.
    let page = cmd.clone().name(name.to_string());
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::fs::write(dir.join(format!("{name}.1")), out)?;
    let mut n = 1;
    // Not clap's generated `help` subcommands: `--help` is on every page already.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        n += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(n)
}
