//! Where a decoder's time goes, part by part (full attention, linear attention and its steps,
//! the experts and theirs), for `bench scoring --parts`: what the stage clock
//! ([`super::stage_clock`]) cannot say, since a stage runs every layer.
//!
//! Off unless a bench turns it on, and then for one extra pass after the timed ones: each part
//! waits for the device before and after, so a GPU can no longer run ahead of the host, and the
//! parts' sum is more than the unclocked pass took. What it tells is the share of each part, and
//! which parts are bound by their kernel launches. Off, a part costs a look at a thread-local.

use std::cell::RefCell;
use std::time::Instant;

use serde::Serialize;
use tch::Device;

thread_local! {
    /// The clock of this thread's passes: a bench scores on the thread that started it.
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

struct Clock {
    device: Device,
    /// Seconds and calls per part, in the order the parts first started.
    parts: Vec<(&'static str, f64, usize)>,
}

/// One part's time over the clocked pass.
#[derive(Debug, Clone, Serialize)]
pub struct PartTime {
    /// `linear attention`, or a step inside a part after a colon: `linear attention: delta rule`.
    pub part: &'static str,
    pub seconds: f64,
    pub calls: usize,
}

/// Starts timing parts on `device`, on this thread, until [`stop`].
pub fn start(device: Device) {
    CLOCK.with(|c| *c.borrow_mut() = Some(Clock { device, parts: Vec::new() }));
}

/// Stops the clock and returns each part's time, in the order the parts first started.
pub fn stop() -> Vec<PartTime> {
    let clock = CLOCK.with(|c| c.borrow_mut().take());
    clock.map_or_else(Vec::new, |c| c.parts.into_iter().map(|(part, seconds, calls)| PartTime { part, seconds, calls }).collect())
}

/// Runs `f`, adding its device time to `part` while this thread's clock is on. A part inside
/// another counts in both.
pub fn timed<T>(part: &'static str, f: impl FnOnce() -> T) -> T {
    // The part takes its place in the list as it starts, so a part comes before its steps.
    let device = CLOCK.with(|c| {
        c.borrow_mut().as_mut().map(|clock| {
            if !clock.parts.iter().any(|(p, _, _)| *p == part) {
                clock.parts.push((part, 0.0, 0));
            }
            clock.device
        })
    });
    let Some(device) = device else {
        return f();
    };
    wait(device);
    let begun = Instant::now();
    let out = f();
    wait(device);
    let spent = begun.elapsed().as_secs_f64();
    CLOCK.with(|c| {
        if let Some(clock) = c.borrow_mut().as_mut() {
            if let Some((_, seconds, calls)) = clock.parts.iter_mut().find(|(p, _, _)| *p == part) {
                *seconds += spent;
                *calls += 1;
            }
        }
    });
    out
}

fn wait(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_while_on_and_nothing_is_kept_off() {
        assert_eq!(timed("off", || 3), 3);
        start(Device::Cpu);
        for _ in 0..2 {
            timed("outer", || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                timed("outer: inner", || std::thread::sleep(std::time::Duration::from_millis(5)));
            });
        }
        let parts = stop();
        assert_eq!(parts.iter().map(|p| (p.part, p.calls)).collect::<Vec<_>>(), [("outer", 2), ("outer: inner", 2)]);
        assert!(parts[0].seconds >= 0.02 && parts[1].seconds >= 0.01 && parts[1].seconds < parts[0].seconds);
        timed("outer after", || ());
        assert!(stop().is_empty(), "a stopped clock keeps nothing");
    }
}
