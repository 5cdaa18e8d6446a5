//! Where a scoring pass spends its time, stage by stage (vision tower, prefix, questions,
//! answers), for `bench scoring`. A GPU runs what it is given after the host has moved on, so
//! each mark first waits for the device: the time between two marks is then the device's time for
//! that stage. Scoring outside the bench uses [`StageClock::off`], which never waits.

use std::time::Instant;

use tch::Device;

pub struct StageClock {
    /// The device to wait for; None: the clock is off.
    device: Option<Device>,
    last: Instant,
    /// Seconds per stage, in the order the stages were first marked.
    seconds: Vec<(&'static str, f64)>,
}

impl StageClock {
    /// Records nothing and never waits for the device.
    pub fn off() -> StageClock {
        StageClock { device: None, last: Instant::now(), seconds: Vec::new() }
    }

    /// Starts now, waiting for `device` at every mark.
    pub fn on(device: Device) -> StageClock {
        StageClock { device: Some(device), last: Instant::now(), seconds: Vec::new() }
    }

    /// Adds the time since the last mark (or since the clock started or was restarted) to
    /// `stage`, once the device has finished the work it was given.
    pub fn mark(&mut self, stage: &'static str) {
        let Some(device) = self.device else { return };
        if let Device::Cuda(index) = device {
            tch::Cuda::synchronize(index as i64);
        }
        let now = Instant::now();
        let spent = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        match self.seconds.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, total)) => *total += spent,
            None => self.seconds.push((stage, spent)),
        }
    }

    /// Forgets what was recorded and starts again now (after a warm-up).
    pub fn restart(&mut self) {
        if let Some(Device::Cuda(index)) = self.device {
            tch::Cuda::synchronize(index as i64);
        }
        self.seconds.clear();
        self.last = Instant::now();
    }

    /// Seconds per stage, in the order the stages were first marked.
    pub fn seconds(&self) -> &[(&'static str, f64)] {
        &self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_add_up_per_stage_and_an_off_clock_records_nothing() {
        let mut clock = StageClock::on(Device::Cpu);
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.mark("vision");
        clock.mark("prefix");
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.mark("vision");
        let stages: Vec<&str> = clock.seconds().iter().map(|(s, _)| *s).collect();
        assert_eq!(stages, ["vision", "prefix"]);
        assert!(clock.seconds()[0].1 >= 0.04 && clock.seconds()[1].1 < clock.seconds()[0].1);
        clock.restart();
        assert!(clock.seconds().is_empty());

        let mut off = StageClock::off();
        off.mark("vision");
        assert!(off.seconds().is_empty());
    }
}
