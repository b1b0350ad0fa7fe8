//! Data parallelism across processes (`train --world-size 2`, on 127.0.0.1) against one
//! process with the same global batch: the same per-step loss and the same final weights,
//! also across a resume of both ranks; and a rank that never starts or dies gives the other
//! a clear error within a bounded time, leaving a resumable run; ranks that disagree on a
//! setting refuse to start, and a signal to one rank stops them all after the same step, as
//! the end of a time budget does.
//! Rows of README "Scale out".

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use burn::backend::NdArray;
use common::{parameters, path_arg, summary, train_command as train, train_losses};
use mlm_train::report::read_metrics;
use mlm_train::{RunDir, TrainConfig, checkpoint};

/// The `mlm-train` binary of this build.
const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

/// No test process may outlive this; they are killed then (and the test fails).
const LIMIT: Duration = Duration::from_secs(120);

/// The micro config, 20 steps of `batch_size` sequences per rank in `parallel_shards`.
fn config(batch_size: usize, parallel_shards: usize) -> TrainConfig {
    common::micro_config()
        .with_max_steps(20)
        .with_eval_every(10)
        .with_checkpoint_every(5)
        // Two of the eight chapters held out: several held-out batches, whose masks must
        // not depend on how many processes cut the global batch.
        .with_held_out_every(4)
        .with_batch_size(batch_size)
        .with_parallel_shards(parallel_shards)
}

/// A port `p` of 127.0.0.1 with `p + 1` and `p + 2` free too: the coordinator and the two
/// ranks' data services.
fn free_ports() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port < 65000 && (1..=2).all(|i| TcpListener::bind(("127.0.0.1", port + i)).is_ok()) {
            return port;
        }
    }
}

/// `mlm-train train --resume RUN [extra]`.
fn resume(run: &Path, extra: &[String]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["train", "--resume", path_arg(run)])
        .args(extra);
    command
}

/// The flags of `rank` of a two-rank run whose coordinator listens on `port`.
fn rank_flags(rank: usize, port: u16, timeout_s: u64) -> Vec<String> {
    [
        "--rank",
        &rank.to_string(),
        "--coordinator",
        &format!("127.0.0.1:{port}"),
        "--collective-timeout",
        &timeout_s.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `commands` at once and waits for all of them, killing any still running after
/// [`LIMIT`].
fn run_together(commands: Vec<Command>) -> Vec<Output> {
    let children: Vec<Child> = commands
        .into_iter()
        .map(|mut c| {
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let deadline = Instant::now() + LIMIT;
    children
        .into_iter()
        .map(|child| wait_until(child, deadline))
        .collect()
}

/// Waits for `child`, killing it at `deadline`.
fn wait_until(mut child: Child, deadline: Instant) -> Output {
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(child.kill());
    child.wait_with_output().unwrap()
}

/// Two ranks of a run too long to end by itself, once rank 0 has written a checkpoint
/// (so both are training).
fn two_ranks_training(run: &Path) -> [Child; 2] {
    let port = free_ports();
    let long = config(8, 1)
        .with_max_steps(100_000)
        .with_eval_every(100_000);
    let ranks = [0, 1].map(|rank| {
        let mut flags = rank_flags(rank, port, 20);
        flags.extend(["--world-size".into(), "2".into()]);
        let mut command = train(&long, run, &flags);
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        command.spawn().unwrap()
    });
    let started = Instant::now();
    while checkpoint::latest(run).is_err() {
        assert!(started.elapsed() < LIMIT, "no checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    ranks
}

fn assert_success(outputs: &[Output]) {
    for (rank, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "process {rank}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn final_weights(run: &Path) -> Vec<f32> {
    let config = RunDir(run.to_path_buf()).load_config().unwrap();
    let latest = checkpoint::latest(run).unwrap();
    parameters(
        &checkpoint::load_model::<NdArray>(&latest, &config.model, &Default::default()).unwrap(),
    )
}

/// The training and held-out losses and the final weights of `a` and `b` agree within
/// 1e-5 (relative for the losses, absolute for the weights), and the training losses change
/// from step to step.
fn assert_same_training(a: &Path, b: &Path, steps: usize) {
    let rows = |run: &Path| read_metrics(&run.join("metrics.csv")).unwrap();
    let (ra, rb) = (rows(a), rows(b));
    assert_eq!(train_losses(&ra).len(), steps);
    assert_eq!(ra.len(), rb.len());
    for (x, y) in ra.iter().zip(&rb) {
        assert_eq!((x.step, &x.split), (y.step, &y.split));
        let (step, x, y) = (x.step, x.loss, y.loss);
        assert!((x - y).abs() <= 1e-5 * x.abs(), "step {step}: {x} vs {y}");
    }
    let la = train_losses(&ra);
    assert!(la.windows(2).all(|w| w[0].1 != w[1].1), "{la:?}");
    let (wa, wb) = (final_weights(a), final_weights(b));
    assert_eq!(wa.len(), wb.len());
    let worst = wa
        .iter()
        .zip(&wb)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(worst <= 1e-5, "weights differ by up to {worst}");
}

#[test]
fn two_ranks_train_what_one_process_trains_with_their_global_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    assert_success(&run_together(vec![train(
        &config(16, 2),
        &one,
        &[] as &[&str],
    )]));
    let port = free_ports();
    let two_ranks = (0..2)
        .map(|rank| {
            let mut flags = rank_flags(rank, port, 60);
            flags.extend(["--world-size".into(), "2".into()]);
            train(&config(8, 1), &two, &flags)
        })
        .collect();
    let outputs = run_together(two_ranks);
    assert_success(&outputs);
    assert_same_training(&one, &two, 20);

    let s = summary(&two);
    assert_eq!(s.world_size, 2);
    let traffic = s.all_reduce.expect("a two-rank run reports its all-reduce");
    // Every gradient in f32, and the step's four totals (loss, correct, stop, progress).
    let parameters = final_weights(&two).len();
    assert_eq!(traffic.bytes_per_step, 4 * (parameters + 4));
    // Rank 1 wrote nothing: the only files are rank 0's run and the two config files.
    let mut names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["one", "one.config.json", "two", "two.config.json"]);
}

#[test]
fn a_two_rank_run_resumes_as_one_process_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let first_half = ["--max-steps".to_string(), "10".into()];
    let second_half = ["--max-steps".to_string(), "20".into()];
    assert_success(&run_together(vec![train(
        &config(16, 2),
        &one,
        &first_half,
    )]));
    assert_success(&run_together(vec![resume(&one, &second_half)]));
    let port = free_ports();
    let ranks = |make: &dyn Fn(Vec<String>) -> Command| -> Vec<Command> {
        (0..2)
            .map(|rank| make(rank_flags(rank, port, 60)))
            .collect()
    };
    assert_success(&run_together(ranks(&|mut flags| {
        flags.extend(["--world-size".into(), "2".into()]);
        flags.extend(first_half.clone());
        train(&config(8, 1), &two, &flags)
    })));
    assert_success(&run_together(ranks(&|mut flags| {
        flags.extend(second_half.clone());
        resume(&two, &flags)
    })));
    assert_same_training(&one, &two, 20);
    assert_eq!(summary(&two).last_segment.first_step, 11);
}

#[test]
fn two_ranks_by_the_clock_follow_rank_0s_clock_and_end_after_the_same_step() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_ports();
    let by_clock = config(8, 1)
        .with_eval_every(100_000)
        .with_checkpoint_every(100_000);
    let outputs = run_together(
        (0..2)
            .map(|rank| {
                let mut flags = rank_flags(rank, port, 20);
                flags.extend(["--world-size", "2", "--time-budget", "3s"].map(String::from));
                train(&by_clock, &run, &flags)
            })
            .collect(),
    );
    // A rank that went on past the other's last step would wait for its sum and time out.
    assert_success(&outputs);
    let s = summary(&run);
    assert_eq!(s.time_budget_seconds, Some(3.0));
    assert!(s.wall_time_seconds >= 3.0, "{} s", s.wall_time_seconds);
    for (rank, out) in outputs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = format!("trained by the clock: {} steps in ", s.steps);
        assert!(stdout.contains(&line), "rank {rank}: {stdout}");
    }
    // The learning rate rises, then falls to 0 at the step that found the budget spent.
    let lrs: Vec<f64> = read_metrics(&run.join("metrics.csv"))
        .unwrap()
        .into_iter()
        .filter(|r| r.split == "train")
        .map(|r| r.learning_rate)
        .collect();
    assert_eq!(lrs.len(), s.steps);
    let peak = by_clock.learning_rate;
    assert!(
        lrs[0] < peak && lrs.iter().any(|&lr| lr > 0.5 * peak),
        "{lrs:?}"
    );
    assert_eq!(*lrs.last().unwrap(), 0.0);
}

#[test]
fn a_rank_that_never_starts_ends_the_other_within_the_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let flags: Vec<String> = rank_flags(0, free_ports(), 3)
        .into_iter()
        .chain(["--world-size".into(), "2".into()])
        .collect();
    let started = Instant::now();
    let out = &run_together(vec![train(&config(8, 1), &tmp.path().join("run"), &flags)])[0];
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(
        stderr.contains("no answer from the other ranks for 3 s while joining the coordinator"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_rank_that_dies_ends_the_other_with_a_resumable_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let [rank0, mut rank1] = two_ranks_training(&run);
    rank1.kill().unwrap();
    rank1.wait().unwrap();
    let killed = Instant::now();
    let out = wait_until(rank0, killed + LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("rank"), "{stderr}");
    assert!(killed.elapsed() < Duration::from_secs(60), "{stderr}");
    // The run resumes (as one rank of two again) from its last complete checkpoint.
    assert!(checkpoint::latest(&run).is_ok());
    assert_eq!(RunDir(run.clone()).load_config().unwrap().world_size, 2);
}

#[test]
fn ranks_with_different_settings_refuse_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let port = free_ports();
    let ranks = (0..2)
        .map(|rank| {
            let mut flags = rank_flags(rank, port, 60);
            let seed = (1 << 24) + rank; // equal as f32: the check compares a hash
            flags.extend(["--world-size", "2", "--seed", &seed.to_string()].map(String::from));
            train(&config(8, 1), &run, &flags)
        })
        .collect();
    for out in run_together(ranks) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("the ranks disagree on the settings"),
            "{stderr}"
        );
    }
    assert!(!run.exists(), "a run that never trained leaves no folder");
}

#[test]
fn a_signal_to_one_rank_stops_every_rank_after_the_same_step() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let [rank0, rank1] = two_ranks_training(&run);
    let status = Command::new("kill")
        .args(["-INT", &rank1.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + LIMIT;
    for (rank, out) in [wait_until(rank0, deadline), wait_until(rank1, deadline)]
        .into_iter()
        .enumerate()
    {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "rank {rank}: {stderr}");
        assert!(
            stderr.contains("stopped by SIGINT at step"),
            "rank {rank}: {stderr}"
        );
    }
    let s = summary(&run);
    assert_eq!(s.stopped_by.as_deref(), Some("SIGINT"));
    let latest = checkpoint::latest(&run).unwrap();
    assert!(
        latest.ends_with(format!("step-{:08}", s.steps)),
        "{latest:?}"
    );
}
