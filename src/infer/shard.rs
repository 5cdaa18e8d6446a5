//! Which images one run scores: shard K of N, given on the command line (`--shard K/N`) or by
//! the array-job scheduler running it (`--shard-count N`). An image's shard is a hash of its
//! name, so N runs on N machines cover every image exactly once, whatever else is selected.

use crate::hashing::stable_u64;

use super::InferError;

/// `K/N`: this run scores the images whose shard is K (0-based) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpec {
    pub index: usize,
    pub count: usize,
}

pub fn parse_shard(s: &str) -> Result<ShardSpec, InferError> {
    let bad = || InferError::Shard(format!("--shard {s:?}: expected K/N with 0 <= K < N, e.g. 0/3"));
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let index: usize = k.trim().parse().map_err(|_| bad())?;
    let count: usize = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(ShardSpec { index, count })
}

/// The shard an image belongs to: a hash of its name, so membership never depends on which
/// other images are selected or in what order.
pub fn shard_of(image: &str, count: usize) -> usize {
    (stable_u64(&["shard", image]) % count as u64) as usize
}

/// The variables array-job schedulers set to a task's index: Kubernetes Indexed Jobs, Slurm job
/// arrays (offset by `SLURM_ARRAY_TASK_MIN`, so `--array=1-4` works too), AWS Batch array jobs.
pub const SCHEDULER_INDEX_VARS: [&str; 3] = ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"];

/// Shard K of `count`, K taken from the scheduler's index variable; also says which variable
/// (and value) it came from. Exactly one of [`SCHEDULER_INDEX_VARS`] must be set.
pub fn shard_from_scheduler(count: usize, env: impl Fn(&str) -> Option<String>) -> Result<(ShardSpec, String), InferError> {
    let fail = |message: String| InferError::Shard(format!("--shard-count {count}: {message}"));
    if count == 0 {
        return Err(fail("the count must be at least 1".into()));
    }
    let set: Vec<(&str, String)> = SCHEDULER_INDEX_VARS.iter().filter_map(|v| env(v).map(|value| (*v, value))).collect();
    let (var, value) = match set.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(fail(format!(
                "no array-job index in the environment (looked for {}); outside a scheduler, use --shard K/N",
                SCHEDULER_INDEX_VARS.join(", ")
            )))
        }
        many => {
            let found: Vec<String> = many.iter().map(|(v, x)| format!("{v}={x}")).collect();
            return Err(fail(format!("more than one array-job index is set ({}): cannot tell which to use", found.join(", "))));
        }
    };
    let number = |name: &str, text: &str| -> Result<usize, InferError> {
        text.trim().parse().map_err(|_| fail(format!("{name}={text:?} is not a whole number")))
    };
    let mut index = number(var, &value)?;
    let mut source = format!("{var}={value}");
    if var == "SLURM_ARRAY_TASK_ID" {
        if let Some(min) = env("SLURM_ARRAY_TASK_MIN") {
            let min = number("SLURM_ARRAY_TASK_MIN", &min)?;
            index = index.checked_sub(min).ok_or_else(|| fail(format!("{source} is below SLURM_ARRAY_TASK_MIN={min}")))?;
            source.push_str(&format!(" minus SLURM_ARRAY_TASK_MIN={min}"));
        }
    }
    if index >= count {
        return Err(fail(format!("{source} gives index {index}, but the shards are 0..{count}: start the array at 0 with {count} tasks")));
    }
    Ok((ShardSpec { index, count }, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn shard_specs_parse_and_partition() {
        assert_eq!(parse_shard("0/3").unwrap(), ShardSpec { index: 0, count: 3 });
        assert!(parse_shard("3/3").is_err());
        assert!(parse_shard("1").is_err());
        assert!(parse_shard("a/b").is_err());
        assert!(parse_shard("0/0").is_err());
        let names: Vec<String> = (0..300).map(|i| format!("{i:08}_000.png")).collect();
        let mut sizes = [0usize; 3];
        for n in &names {
            sizes[shard_of(n, 3)] += 1;
        }
        assert_eq!(sizes.iter().sum::<usize>(), 300);
        assert!(sizes.iter().all(|&s| s > 70), "shards are balanced: {sizes:?}");
    }

    #[test]
    fn each_scheduler_names_the_index() {
        let (shard, source) = shard_from_scheduler(4, env(&[("JOB_COMPLETION_INDEX", "2")])).unwrap();
        assert_eq!((shard, source.as_str()), (ShardSpec { index: 2, count: 4 }, "JOB_COMPLETION_INDEX=2"));
        let (shard, _) = shard_from_scheduler(4, env(&[("AWS_BATCH_JOB_ARRAY_INDEX", "3")])).unwrap();
        assert_eq!(shard.index, 3);
        // Slurm arrays may start anywhere: --array=1-4 gives 0..4.
        let (shard, source) = shard_from_scheduler(4, env(&[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_MIN", "1")])).unwrap();
        assert_eq!((shard.index, source.as_str()), (3, "SLURM_ARRAY_TASK_ID=4 minus SLURM_ARRAY_TASK_MIN=1"));
    }

    #[test]
    fn a_missing_ambiguous_or_out_of_range_index_is_refused() {
        let err = |vars: &[(&str, &str)], count| shard_from_scheduler(count, env(vars)).unwrap_err().to_string();
        assert!(err(&[], 4).contains("no array-job index") && err(&[], 4).contains("--shard K/N"));
        let both = err(&[("JOB_COMPLETION_INDEX", "1"), ("SLURM_ARRAY_TASK_ID", "1")], 4);
        assert!(both.contains("more than one") && both.contains("SLURM_ARRAY_TASK_ID=1"), "{both}");
        assert!(err(&[("JOB_COMPLETION_INDEX", "4")], 4).contains("start the array at 0 with 4 tasks"));
        assert!(err(&[("JOB_COMPLETION_INDEX", "two")], 4).contains("is not a whole number"));
        assert!(err(&[("JOB_COMPLETION_INDEX", "0")], 0).contains("at least 1"));
    }
}
