//! A bad `eal-args` is an element error that says the cause and the fix, leaves no
//! runtime directory behind, and since a failed EAL cannot start again in the same
//! process, later starts say so.

mod common;

use common::*;

#[test]
fn bad_eal_args_fail_clearly_and_for_good() {
    let _g = serial();
    // Options that parse, then fail inside the EAL after it made its runtime
    // directory (the main lcore is not among the lcores).
    let bad = "--no-huge --lcores=0@(0) --main-lcore=5";
    let e = start_error(&[("eal-args", bad)]).expect("fails");
    assert!(e.contains("DPDK EAL initialisation failed"), "{e}");
    assert!(e.contains("--main-lcore=5"), "shows the arguments: {e}");
    assert!(e.contains("EAL parameters"), "says what to check: {e}");
    let dir =
        std::path::Path::new("/var/run/dpdk").join(format!("firehose-{}", std::process::id()));
    assert!(
        !dir.exists(),
        "the failed start left {} behind",
        dir.display()
    );

    let e = start_error(&[("eal-args", "--no-huge --no-pci")]).expect("fails");
    assert!(e.contains("restart the process"), "{e}");
    assert!(
        e.contains("--main-lcore=5"),
        "repeats the first failure: {e}"
    );
}
