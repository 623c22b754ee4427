//! A lock whose holder was SIGKILLed is taken over by the next run.
//!
//! Its own test binary because it spawns processes: a child forked while another test of
//! the same process holds a `flock` inherits that descriptor until it execs, so the lock
//! outlives its `drop` for a moment and the other test sees it held. envc itself never
//! drops a lock and takes it again while spawning in another thread; tests sharing one
//! process do.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::process::{Command, Stdio};
use std::time::Duration;

use envc_executor::{EnvLock, Holder, Store};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join(".envc")).unwrap();
    (dir, s)
}

#[test]
fn a_lock_left_by_a_killed_process_is_taken_over() {
    let (_d, s) = store();
    // Take the lock in another process (util-linux `flock`, the same kernel lock), then
    // SIGKILL it: its lock must not block the next run.
    EnvLock::acquire(&s, "prod", false, &Holder::current("create the file")).unwrap();
    let lock_file = s.root().join("locks/prod.lock");
    // `-o`: the lock's descriptor is closed before `sleep` runs, so the `flock` process
    // alone holds the lock.
    let mut child = Command::new("flock")
        .arg("-o")
        .arg(&lock_file)
        .args(["sleep", "60"])
        .stdout(Stdio::null())
        .spawn()
        .expect("flock (util-linux) runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while EnvLock::acquire(&s, "prod", false, &Holder::current("probe")).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
        .unwrap_or_default();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for pid in children.split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", pid]).status(); // the orphaned `sleep`
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match EnvLock::acquire(&s, "prod", false, &Holder::current("after the kill")) {
            Ok(_) => break,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "lock still held after its holder died: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
