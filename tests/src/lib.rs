//! Cross-crate tests live in tests/tests/; this library holds what several of them share.

use std::path::PathBuf;

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
    let dir = std::env::temp_dir().join(format!("fh-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(so.canonicalize().unwrap(), dir.join("libgstfirehose.so")).unwrap();
    dir
}
