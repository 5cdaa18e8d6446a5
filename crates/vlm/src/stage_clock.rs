//! Where a scoring pass spends its time, stage by stage (vision tower, prefix, questions,
//! answers), for `bench scoring`. A GPU runs what it is given after the host has moved on, so
//! each mark first waits for the device: the time between two marks is then the device's time for
//! that stage. Scoring outside the bench uses [`StageClock::off`], which never waits.

use std::time::Instant;

use serde::Serialize;
use tch::Device;

/// A stage of scoring an image: the vision tower; the prefix (the prompt up to the questions, the
/// image in it); the questions (every question's own tokens over the prefix); the answers (the
/// two logits of each question, read back to the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Vision,
    Prefix,
    Questions,
    Answers,
}

pub struct StageClock {
    /// The device to wait for; None: the clock is off.
    device: Option<Device>,
    last: Instant,
    /// Seconds per stage, in the order the stages were first marked.
    seconds: Vec<(Stage, f64)>,
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
    pub fn mark(&mut self, stage: Stage) {
        if self.device.is_none() {
            return;
        }
        self.wait();
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
        self.wait();
        self.seconds.clear();
        self.last = Instant::now();
    }

    /// Seconds per stage, in the order the stages were first marked.
    pub fn seconds(&self) -> &[(Stage, f64)] {
        &self.seconds
    }

    /// Returns once the device has finished the work it was given (at once off a GPU).
    fn wait(&self) {
        if let Some(Device::Cuda(index)) = self.device {
            tch::Cuda::synchronize(index as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_add_up_per_stage_and_an_off_clock_records_nothing() {
        let mut clock = StageClock::on(Device::Cpu);
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.mark(Stage::Vision);
        clock.mark(Stage::Prefix);
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.mark(Stage::Vision);
        let stages: Vec<Stage> = clock.seconds().iter().map(|(s, _)| *s).collect();
        assert_eq!(stages, [Stage::Vision, Stage::Prefix]);
        assert!(clock.seconds()[0].1 >= 0.04 && clock.seconds()[1].1 < clock.seconds()[0].1);
        clock.restart();
        assert!(clock.seconds().is_empty());

        let mut off = StageClock::off();
        off.mark(Stage::Vision);
        assert!(off.seconds().is_empty());
    }
}
