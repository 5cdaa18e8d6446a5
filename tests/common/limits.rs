//! Runs the binary under a time limit and a memory limit, as a test of hostile input needs: a
//! command that loops or swells is killed and reported, not left to hang the suite or take
//! the machine's memory, and the peak resident memory of a command that ended is measured
//! (wait4's ru_maxrss, for this one child).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a limited run ended.
#[derive(Debug)]
pub struct Limited {
    /// The exit code; None when the run was killed or died of a signal.
    pub code: Option<i32>,
    /// Why the run was killed, when it was.
    pub killed: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident memory in bytes.
    pub peak_rss: u64,
    pub elapsed: Duration,
}

impl Limited {
    /// A failure with a clear message: exit code 1 or 2, not killed, no panic or backtrace,
    /// and stderr non-empty.
    pub fn failed_cleanly(&self) -> bool {
        matches!(self.code, Some(1 | 2))
            && self.killed.is_none()
            && !self.stderr.contains("panicked")
            && !self.stderr.contains("RUST_BACKTRACE")
            && !self.stderr.trim().is_empty()
    }
}

/// The resident memory of a running process, from /proc (0 once it is gone).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `command` (its stdin closed), killing it past `time` or past `memory` bytes resident.
// The child is reaped by `wait4` (for its resource usage), which clippy does not see.
#[allow(clippy::zombie_processes)]
pub fn run_limited(mut command: Command, time: Duration, memory: u64) -> Limited {
    let start = Instant::now();
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
    let pid = child.id();
    // Drain both pipes on threads of their own, so a chatty child never blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut killed = None;
    loop {
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a plain wait4 on our own child, WNOHANG; status and usage are ours.
        let done = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
        if done == pid as i32 {
            let code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
            return Limited {
                code: if killed.is_some() { None } else { code },
                killed,
                stdout: out.join().unwrap(),
                stderr: err.join().unwrap(),
                peak_rss: usage.ru_maxrss as u64 * 1024,
                elapsed: start.elapsed(),
            };
        }
        if killed.is_none() {
            let resident = rss(pid);
            if resident > memory {
                killed = Some(format!("killed at {} MiB resident, over the limit of {} MiB", resident >> 20, memory >> 20));
            } else if start.elapsed() > time {
                killed =
                    Some(format!("killed after {:.1} s, over the limit of {:.0} s", start.elapsed().as_secs_f64(), time.as_secs_f64()));
            }
            if killed.is_some() {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
