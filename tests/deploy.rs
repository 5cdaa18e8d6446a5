//! The array-job templates in deploy/ agree with the tool: the Kubernetes Indexed Job runs as
//! many shards as it has completions and retries each index on its own; the Slurm task takes its
//! shard count from the array.

mod common;

use common::repo;

#[test]
fn the_kubernetes_indexed_job_runs_one_shard_per_index() {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/infer-indexed-job.yaml")).unwrap();
    let job: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert!(spec["backoffLimitPerIndex"].as_u64().is_some(), "each index is retried on its own");
    let args: Vec<&str> =
        spec["template"]["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let count = args.iter().position(|a| *a == "--shard-count").map(|i| args[i + 1]).expect("--shard-count");
    assert_eq!(count, spec["completions"].as_u64().unwrap().to_string(), "one shard per completion index");
    assert_eq!(args[0], "infer");

    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/merge-build-job.yaml")).unwrap();
    let merge: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let env = |job: &serde_json::Value| job["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    assert_eq!(env(&merge), env(&job), "the merge build reads the cache the array filled");
    assert_eq!(merge["spec"]["template"]["spec"]["containers"][0]["args"][0], "build");
}

#[test]
fn the_slurm_task_takes_its_shard_count_from_the_array() {
    let text = std::fs::read_to_string(repo().join("deploy/slurm/infer-array.sbatch")).unwrap();
    assert!(text.contains("count=\"${SLURM_ARRAY_TASK_COUNT:?") && text.contains("--shard-count \"$count\""), "{text}");
    assert!(text.contains("BPALS_TASK_ATTEMPTS"), "a failed run is retried inside the job: {text}");
    let submit = std::fs::read_to_string(repo().join("deploy/slurm/submit.sh")).unwrap();
    assert!(submit.contains("--dependency=\"afterok:"), "the merge waits for every task");
}
