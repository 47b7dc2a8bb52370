//! Cross-crate tests live in tests/tests/; this library holds what several of them share.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh, empty directory in the temp directory, unique to this process and `tag`.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fh-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory holding only the plugin built with the running test (a link to
/// `libgstfirehose.so` beside its binary), for a child process's GST_PLUGIN_PATH the way
/// users load it; `tag` keeps the directories of different tests apart.
pub fn plugin_dir(tag: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = [
        deps.join("libgstfirehose.so"),
        deps.join("../libgstfirehose.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("libgstfirehose.so not found beside {}", exe.display()));
    let dir = temp_dir(tag);
    std::os::unix::fs::symlink(so.canonicalize().unwrap(), dir.join("libgstfirehose.so")).unwrap();
    dir
}

/// Starts the system Python (`/usr/bin/python3`, with the distribution's PyGObject and
/// numpy) on `script` (relative to the repository root) with `args`, loading the plugin
/// the way users do: from `plugins` (a [`plugin_dir`]) on GST_PLUGIN_PATH, with a fresh
/// registry there. Its stdout and stderr are piped.
pub fn spawn_system_python(plugins: &Path, script: &str, args: &[&str]) -> Child {
    Command::new("/usr/bin/python3")
        .arg(repo_root().join(script))
        .args(args)
        .env("GST_PLUGIN_PATH", plugins)
        .env("GST_REGISTRY", plugins.join("registry.bin"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (apt install python3-gi gir1.2-gstreamer-1.0 python3-numpy)")
}

/// The first line `child` printed (its stdout piped), and the reader of the rest.
pub fn first_line(child: &mut Child) -> (BufReader<ChildStdout>, String) {
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    (stdout, first)
}

/// What `child` wrote to its stderr (piped), to its end; empty once taken.
pub fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}
