//! End to end: build the embedded-sample release and check what a user and an auditor would.

mod common;

use common::*;
use predicates::str::contains;

#[test]
fn sample_build_writes_a_verifiable_release() {
    let s = Scratch::new();
    let out = s.path("s1a");
    let a = build(&fixture_s1a(), &out, &s.cache(), &["--jobs", "2"]).success();
    let text = stdout(&a) + &stderr(&a);
    assert!(text.contains("DEMO BUILD"), "the demo is announced loudly:\n{text}");
    assert!(text.contains("EMBEDDED SYNTHETIC SAMPLE"), "{text}");
    assert!(text.contains("fixture scorer"), "{text}");

    for f in ["README.md", "LICENSE.md", "manifest.json", "build.lock", "data/trial-00000-of-00001.parquet"] {
        assert!(out.join(f).is_file(), "{f} is written");
    }
    // The manifest agrees with an independent sha256 of every file, and lists every file.
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let digests = tree_digest(&out);
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len() + 1, digests.len(), "every file but the manifest is listed");
    for f in files {
        let path = f["path"].as_str().unwrap();
        assert_eq!(digests[path], f["sha256"].as_str().unwrap(), "{path}");
        assert_eq!(std::fs::metadata(out.join(path)).unwrap().len(), f["bytes"].as_u64().unwrap());
    }
    assert!(manifest["demo_reasons"].as_array().unwrap().len() >= 2);
    let shard = files.iter().find(|f| f["path"] == "data/trial-00000-of-00001.parquet").unwrap();
    assert!(shard["rows"].as_u64().unwrap() > 0);

    bin().arg("verify").arg(&out).assert().success().stdout(contains("ok: release s1a"));
    // No staging directory is left beside the release.
    let leftovers: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Every plot the card shows is a PNG in the release, listed in the manifest.
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let plots: Vec<&str> = card.match_indices("](plots/").map(|(i, _)| &card[i + 2..i + 2 + card[i + 2..].find(')').unwrap()]).collect();
    assert_eq!(plots.len(), 3, "{plots:?}");
    for plot in plots {
        assert!(files.iter().any(|f| f["path"] == plot), "{plot} is in the manifest");
        let image = image::open(out.join(plot)).unwrap_or_else(|e| panic!("{plot}: {e}")).to_rgb8();
        assert!(image.width() >= 800 && image.height() >= 600, "{plot}");
        let inked = image.pixels().filter(|p| p.0 != [255, 255, 255]).count();
        assert!(inked > 10_000, "{plot} draws something ({inked} non-white pixels)");
    }
}

#[test]
fn card_front_matter_parses_and_matches_the_shards() {
    let s = Scratch::new();
    let out = s.path("s1b");
    build(&fixture_s1b(), &out, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let front = card.strip_prefix("---\n").unwrap().split("\n---\n").next().unwrap();
    let yaml: serde_json::Value = serde_saphyr::from_str(front).expect("front matter is valid YAML");
    assert_eq!(yaml["license"], "other");
    assert_eq!(yaml["license_link"], "LICENSE.md");
    assert!(yaml["extra_gated_prompt"].is_string(), "the standard tier is gated");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let configs = yaml["configs"].as_array().unwrap();
    let names: Vec<&str> = configs.iter().map(|c| c["config_name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "images"], "the pair table, then the image-level error traces");
    let mut matched_files = 0;
    for config in configs {
        let data_files = config["data_files"].as_array().unwrap();
        let splits: Vec<&str> = data_files.iter().map(|d| d["split"].as_str().unwrap()).collect();
        assert_eq!(splits, ["full", "trial"]);
        let info = yaml["dataset_info"].as_array().unwrap().iter().find(|i| i["config_name"] == config["config_name"]).unwrap();
        for d in data_files {
            let glob = d["path"].as_str().unwrap();
            let prefix = glob.trim_end_matches("*.parquet");
            let shards: Vec<_> =
                manifest["files"].as_array().unwrap().iter().filter(|f| f["path"].as_str().unwrap().starts_with(prefix)).collect();
            assert!(!shards.is_empty(), "{glob} matches a shard");
            matched_files += shards.len();
            let rows: u64 = shards.iter().map(|f| f["rows"].as_u64().unwrap()).sum();
            let split = info["splits"].as_array().unwrap().iter().find(|x| x["name"] == d["split"]).unwrap();
            assert_eq!(split["num_examples"].as_u64().unwrap(), rows, "{glob}");
        }
    }
    let parquet_files = manifest["files"].as_array().unwrap().iter().filter(|f| f["path"].as_str().unwrap().ends_with(".parquet")).count();
    assert_eq!(matched_files, parquet_files, "every shard belongs to exactly one config and split");
    assert!(card.contains("Giving pledge"));
    assert!(
        card.contains("1% of every sale of this release") && card.contains("since 2026-07-15") && card.contains("toward 10%"),
        "the pledge rate, from the spec"
    );
    let license = std::fs::read_to_string(out.join("LICENSE.md")).unwrap();
    assert!(license.contains("Giving pledge: 1% of every sale"), "{license}");
    assert!(card.contains("Wang X, Peng Y, Lu L, Lu Z, Bagheri M, Summers RM"));
    assert!(card.contains("https://nihcc.app.box.com/v/ChestXray-NIHCC"));
    assert!(card.contains("| S2 | Diagnose |"), "the roadmap lists later series");
    assert!(card.contains("~2026-10"), "tentative dates are shown as approximate");
}

#[test]
fn builds_are_byte_identical_whatever_the_thread_count() {
    let s = Scratch::new();
    build(&fixture_s1b(), &s.path("one"), &s.path("cache1"), &["--jobs", "1"]).success();
    build(&fixture_s1b(), &s.path("four"), &s.path("cache4"), &["--jobs", "4"]).success();
    assert_eq!(tree_digest(&s.path("one")), tree_digest(&s.path("four")));
}

#[test]
fn sharded_inference_merges_into_the_same_bytes() {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("plain"), &s.path("cache-plain"), &[]).success();
    for k in 0..3 {
        bin()
            .args(["infer"])
            .arg(fixture_s1a())
            .args(["--shard", &format!("{k}/3"), "--no-progress", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .assert()
            .success()
            .stdout(contains(format!("shard {k}/3")));
    }
    let a = build(&fixture_s1a(), &s.path("merged"), &s.path("cache-shared"), &[]).success();
    assert!(stderr(&a).contains(", 0 scored"), "the merge build scores nothing: {}", stderr(&a));
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("merged")));
}

/// An array job: four processes at once, each told its index only by the scheduler's variable
/// (a Kubernetes Indexed Job's JOB_COMPLETION_INDEX), then the one merge build.
#[test]
fn array_job_tasks_take_their_index_from_the_scheduler() {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("plain"), &s.path("cache-plain"), &[]).success();
    let task = |k: usize| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"))
            .arg("infer")
            .arg(fixture_s1a())
            .args(["--shard-count", "4", "--no-progress", "--jobs", "1", "--cache-dir"])
            .arg(s.path("cache-shared"))
            .env("JOB_COMPLETION_INDEX", k.to_string())
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("AWS_BATCH_JOB_ARRAY_INDEX")
            .output()
            .unwrap()
    };
    let task = &task;
    let outputs = std::thread::scope(|scope| {
        let tasks: Vec<_> = (0..4).map(|k| scope.spawn(move || task(k))).collect();
        tasks.into_iter().map(|t| t.join().unwrap()).collect::<Vec<_>>()
    });
    for (k, out) in outputs.into_iter().enumerate() {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "task {k}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("shard {k}/4 (index from JOB_COMPLETION_INDEX={k})")), "{text}");
    }
    let a = build(&fixture_s1a(), &s.path("merged"), &s.path("cache-shared"), &[]).success();
    assert!(stderr(&a).contains(", 0 scored"), "the merge build scores nothing: {}", stderr(&a));
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("merged")));

    // Outside a scheduler, --shard-count says what it looked for.
    let a = bin()
        .arg("infer")
        .arg(fixture_s1a())
        .args(["--shard-count", "4", "--cache-dir"])
        .arg(s.path("cache-none"))
        .env_remove("JOB_COMPLETION_INDEX")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("AWS_BATCH_JOB_ARRAY_INDEX")
        .assert()
        .failure();
    assert!(stderr(&a).contains("no array-job index in the environment"), "{}", stderr(&a));
}

#[test]
fn a_killed_build_leaves_no_release_and_the_rerun_matches() {
    let s = Scratch::new();
    build(&fixture_s1b(), &s.path("reference"), &s.path("cache-ref"), &[]).success();
    let out = s.path("killed");
    let cache = s.path("cache-killed");
    let spawn = || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"))
            .arg("build")
            .arg(fixture_s1b())
            .arg("--out")
            .arg(&out)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--no-progress", "--jobs", "1"])
            .env_remove("BPALS_NIH_ROOT")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Finished score entries only: a kill can leave the cache writer's temp file behind.
    let scores = cache.join("scores-v2");
    let cached =
        || if scores.exists() { files_under(&scores).iter().filter(|p| p.extension().is_some_and(|e| e == "json")).count() } else { 0 };
    let mut killed_midway = 0;
    let mut killed_during_inference = false;
    // Fixed delays land in different stages; the last round waits for the cache to grow, so one
    // kill surely lands in the middle of inference whatever the machine's speed.
    for delay_ms in [5u64, 20, 60, 120, 250, 0] {
        if delay_ms == 0 && cache.exists() {
            // Earlier rounds may have scored everything: start the polling round from empty.
            std::fs::remove_dir_all(&cache).unwrap();
        }
        let before = cached();
        let mut child = spawn();
        if delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        } else {
            let start = std::time::Instant::now();
            while cached() == before && start.elapsed() < std::time::Duration::from_secs(60) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed_midway += 1;
            killed_during_inference |= delay_ms == 0 && cached() > before;
        }
        child.wait().unwrap();
        if out.exists() {
            // Only a complete release may ever appear under the target name.
            bin().arg("verify").arg(&out).assert().success();
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    assert!(killed_during_inference, "one build was killed after scoring some images");
    assert!(killed_midway > 0, "at least one build was killed while running");
    let a = build(&fixture_s1b(), &out, &cache, &[]).success();
    assert!(!stderr(&a).contains("infer: 0 images from the cache"), "the rerun reuses the cache: {}", stderr(&a));
    assert_eq!(tree_digest(&s.path("reference")), tree_digest(&out));
    let leftovers: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "staging directories are cleaned up: {leftovers:?}");
}

#[test]
fn rebuild_reuses_the_cache() {
    let s = Scratch::new();
    let a = build(&fixture_s1a(), &s.path("a"), &s.cache(), &[]).success();
    assert!(stderr(&a).contains("infer: 0 images from the cache"));
    let b = build(&fixture_s1a(), &s.path("a"), &s.cache(), &[]).success();
    assert!(stderr(&b).contains(", 0 scored"), "{}", stderr(&b));
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let s = Scratch::new();
    let out = s.path("dry");
    let a = build(&fixture_s1a(), &out, &s.cache(), &["--dry-run"]).success();
    let text = stdout(&a);
    for stage in ["ingest", "select", "infer", "signal", "shard", "card"] {
        assert!(text.contains(stage), "{stage} in plan:\n{text}");
    }
    assert!(text.contains("0/640 images cached"), "{text}");
    assert!(text.contains("DEMO BUILD"));
    assert!(!out.exists());
    assert!(!s.cache().exists(), "a dry run scores nothing");
    // After a build, the plan reports the cache hits.
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    let a = build(&fixture_s1a(), &out, &s.cache(), &["--dry-run", "--json"]).success();
    let plan: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(plan["cached_images"], 640);
}

#[test]
fn verify_names_changed_missing_and_extra_files() {
    let s = Scratch::new();
    let out = s.path("r");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    let shard = out.join("data/trial-00000-of-00001.parquet");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&shard, &bytes).unwrap();
    std::fs::remove_file(out.join("LICENSE.md")).unwrap();
    std::fs::write(out.join("notes.txt"), "stray").unwrap();
    bin()
        .arg("verify")
        .arg(&out)
        .assert()
        .failure()
        .stdout(contains("changed: data/trial-00000-of-00001.parquet"))
        .stdout(contains("missing: LICENSE.md"))
        .stdout(contains("extra (not in the manifest): notes.txt"));
}

#[test]
fn the_trial_split_is_stratified_and_recorded() {
    let s = Scratch::new();
    let out = s.path("r");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(card.contains("stratified toward harder"));
    assert!(card.contains("| stratum (trust class) | share | target | available | taken |"));
    assert!(card.contains("say nothing about NIH's overall label error rate"));
}
