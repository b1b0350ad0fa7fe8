//! Data parallelism across processes started by `mpirun -np 2` (the `mpi` feature) against
//! one process with the same global batch: the same per-step loss and the same final
//! weights, also across a resume of both ranks; a rank that dies or hangs ends the job
//! within a bounded time, leaving a resumable run; ranks that disagree on a setting refuse
//! to start, and a signal to one rank stops them all after the same step, as the end of a
//! time budget does; two ranks continue a Hugging Face checkpoint as one process does.
//! Without the feature, a launcher's world is refused.
//! Rows of docs/SCALE_OUT.md.

mod common;

use common::{micro_config, train_command as train};

/// The micro config, 20 steps of `batch_size` sequences per rank in `parallel_shards`.
fn config(batch_size: usize, parallel_shards: usize) -> mlm_train::TrainConfig {
    micro_config()
        .with_max_steps(20)
        .with_eval_every(10)
        .with_checkpoint_every(5)
        // Two of the eight chapters held out: several held-out batches, whose masks must
        // not depend on how many processes cut the global batch.
        .with_held_out_every(4)
        .with_batch_size(batch_size)
        .with_parallel_shards(parallel_shards)
}

#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_refuses_a_launchers_world_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = train(&config(8, 1), &run, &[] as &[&str])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("one of 2 processes") && stderr.contains("built without the `mpi` feature"),
        "{stderr}"
    );
    assert!(!run.exists());
}

#[cfg(feature = "mpi")]
mod under_mpirun {
    use super::*;
    use common::{flex_device, parameters, resume_command as resume, summary, train_losses};
    use mlm_train::RunDir;
    use mlm_train::run::checkpoint;
    use mlm_train::run::report::read_metrics;
    use std::path::Path;
    use std::process::{Child, Command, Output, Stdio};
    use std::time::{Duration, Instant};

    /// No test process may outlive this; they are killed then (and the test fails).
    const LIMIT: Duration = Duration::from_secs(120);

    /// `mpirun` of `commands` (one rank each; MPMD when they differ), with Open MPI's
    /// settings for a test machine: root allowed, ranks' output tagged `[1,R]<stderr>:`,
    /// shared memory without the cross-process copy that containers forbid.
    fn mpirun(commands: &[Command]) -> Command {
        let mut mpirun = Command::new("mpirun");
        mpirun
            .args(["--oversubscribe", "--tag-output"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        for (i, command) in commands.iter().enumerate() {
            if i > 0 {
                mpirun.arg(":");
            }
            mpirun
                .args(["-np", "1"])
                .arg(command.get_program())
                .args(command.get_args());
        }
        mpirun
    }

    /// `mpirun -np 2` of `command`.
    fn two_ranks(command: Command) -> Command {
        let mut mpirun = mpirun(&[]);
        mpirun
            .args(["-np", "2"])
            .arg(command.get_program())
            .args(command.get_args());
        mpirun
    }

    /// Runs `command` and waits for it, killing it after [`LIMIT`]; asserts nothing.
    fn run_bounded(mut command: Command) -> Output {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        wait_until(command.spawn().unwrap(), Instant::now() + LIMIT)
    }

    /// Waits for `child`, killing it at `deadline`.
    fn wait_until(mut child: Child, deadline: Instant) -> Output {
        while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(child.kill());
        child.wait_with_output().unwrap()
    }

    fn assert_success(out: &Output) {
        assert!(
            out.status.success(),
            "{:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The processes that `mpirun` started, by rank (its children, read from `/proc`).
    fn rank_pids(mpirun: &Child) -> Vec<u32> {
        let pid = mpirun.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let mut ranks: Vec<(usize, u32)> = children
            .split_whitespace()
            .filter_map(|child| {
                let environ = std::fs::read(format!("/proc/{child}/environ")).ok()?;
                let rank = environ
                    .split(|&b| b == 0)
                    .find_map(|var| var.strip_prefix(b"OMPI_COMM_WORLD_RANK="))?;
                Some((
                    std::str::from_utf8(rank).ok()?.parse().ok()?,
                    child.parse().ok()?,
                ))
            })
            .collect();
        ranks.sort();
        ranks.into_iter().map(|(_, pid)| pid).collect()
    }

    /// `mpirun` of two ranks of a run too long to end by itself, once rank 0 has written a
    /// checkpoint (so both are training), and the ranks' process ids.
    fn two_ranks_training(run: &Path, timeout_s: u64) -> (Child, Vec<u32>) {
        let long = config(8, 1)
            .with_max_steps(100_000)
            .with_eval_every(100_000);
        let timeout = ["--collective-timeout".to_string(), timeout_s.to_string()];
        let mut command = two_ranks(train(&long, run, &timeout));
        command.stdout(Stdio::null()).stderr(Stdio::piped());
        let mpirun = command.spawn().unwrap();
        let started = Instant::now();
        while checkpoint::latest(run).is_err() {
            assert!(started.elapsed() < LIMIT, "no checkpoint");
            std::thread::sleep(Duration::from_millis(50));
        }
        let pids = rank_pids(&mpirun);
        assert_eq!(pids.len(), 2, "the ranks of mpirun {}", mpirun.id());
        (mpirun, pids)
    }

    fn signal(pid: u32, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn final_weights(run: &Path) -> Vec<f32> {
        let config = RunDir(run.to_path_buf()).load_config().unwrap();
        let latest = checkpoint::latest(run).unwrap();
        parameters(&checkpoint::load_model(&latest, &config.model, &flex_device()).unwrap())
    }

    /// The training and held-out losses and the final weights of `a` and `b` agree within
    /// 1e-5 (relative for the losses, absolute for the weights), and the training losses
    /// change from step to step.
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

    /// The lines that rank `rank` wrote to stderr (`--tag-output` tags every write, and
    /// stderr is unbuffered: a line may carry several tags).
    fn rank_stderr(out: &Output, rank: usize) -> String {
        let tag = format!("[1,{rank}]<stderr>:");
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|line| line.starts_with(&tag))
            .map(|line| line.replace(&tag, ""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn two_ranks_train_what_one_process_trains_with_their_global_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        assert_success(&run_bounded(train(&config(16, 2), &one, &[] as &[&str])));
        let out = run_bounded(two_ranks(train(&config(8, 1), &two, &[] as &[&str])));
        assert_success(&out);
        assert_same_training(&one, &two, 20);

        let s = summary(&two);
        assert_eq!(s.world_size, 2);
        let traffic = s.all_reduce.expect("a two-rank run reports its all-reduce");
        // Every gradient in f32, and the step's five totals: loss, correct, the ranks that
        // received SIGINT and SIGTERM, and rank 0's budget progress.
        let parameters = final_weights(&two).len();
        assert_eq!(traffic.bytes_per_step, 4 * (parameters + 5));
        // Rank 1 wrote nothing: the only files are rank 0's run and the two config files.
        let mut names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["one", "one.config.json", "two", "two.config.json"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("[1,1]<stdout>:rank 1 done; rank 0 saved the run"));
    }

    #[test]
    fn two_ranks_continue_a_hugging_face_checkpoint_as_one_process_does() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        let bert =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/continued/bert");
        let flags = ["--init-from", bert.to_str().unwrap(), "--max-seq-len", "16"];
        assert_success(&run_bounded(train(&config(16, 2), &one, &flags)));
        assert_success(&run_bounded(two_ranks(train(&config(8, 1), &two, &flags))));
        assert_same_training(&one, &two, 20);
        let config = RunDir(two.clone()).load_config().unwrap();
        assert_eq!((config.world_size, config.model.hidden_size()), (2, 16));
    }

    #[test]
    fn a_two_rank_run_resumes_as_one_process_resumes_and_only_as_two() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        let first_half = ["--max-steps", "10"];
        let second_half = ["--max-steps", "20"];
        assert_success(&run_bounded(train(&config(16, 2), &one, &first_half)));
        assert_success(&run_bounded(resume(&one, &second_half)));
        assert_success(&run_bounded(two_ranks(train(
            &config(8, 1),
            &two,
            &first_half,
        ))));
        // Alone, the run is refused: it was trained by two ranks.
        let alone = run_bounded(resume(&two, &second_half));
        let stderr = String::from_utf8_lossy(&alone.stderr);
        assert_eq!(alone.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("world_size = 2, but 1 process(es) started: run it as 2 processes"),
            "{stderr}"
        );
        assert_success(&run_bounded(two_ranks(resume(&two, &second_half))));
        assert_same_training(&one, &two, 20);
        assert_eq!(summary(&two).last_segment.first_step, 11);
    }

    #[test]
    fn two_ranks_by_the_clock_follow_rank_0s_clock_and_end_after_the_same_step() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let by_clock = config(8, 1)
            .with_eval_every(100_000)
            .with_checkpoint_every(100_000);
        let out = run_bounded(two_ranks(train(&by_clock, &run, &["--time-budget", "3s"])));
        // A rank that went on past the other's last step would wait for its sum forever.
        assert_success(&out);
        let s = summary(&run);
        assert_eq!(s.time_budget_seconds, Some(3.0));
        assert!(s.wall_time_seconds >= 3.0, "{} s", s.wall_time_seconds);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for rank in 0..2 {
            let line = format!(
                "[1,{rank}]<stdout>:trained by the clock: {} steps in ",
                s.steps
            );
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
    fn a_rank_that_dies_ends_the_job_at_once_and_the_run_resumes() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let (mpirun, ranks) = two_ranks_training(&run, 300);
        signal(ranks[1], "KILL");
        let killed = Instant::now();
        let out = wait_until(mpirun, killed + LIMIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        // mpirun itself ends the job, long before the collective timeout of 300 s.
        assert!(killed.elapsed() < Duration::from_secs(30), "{stderr}");
        assert!(stderr.contains("exited on signal 9"), "{stderr}");
        // The run resumes, as two ranks again, from its last complete checkpoint.
        let latest = checkpoint::latest(&run).unwrap();
        let step: usize = latest
            .to_str()
            .unwrap()
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let more = (step + 2).to_string();
        assert_success(&run_bounded(two_ranks(resume(
            &run,
            &["--max-steps", &more],
        ))));
        assert_eq!(summary(&run).steps, step + 2);
    }

    #[test]
    fn a_rank_that_hangs_ends_the_job_after_the_collective_timeout() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let (mpirun, ranks) = two_ranks_training(&run, 3);
        signal(ranks[1], "STOP");
        let stopped = Instant::now();
        let out = wait_until(mpirun, stopped + LIMIT);
        let rank0 = rank_stderr(&out, 0);
        assert!(!out.status.success(), "{rank0}");
        assert!(
            rank0.contains(
                "error: rank 0: no answer from the other ranks for 3 s during the gradient \
                 all-reduce"
            ),
            "{rank0}"
        );
        assert!(stopped.elapsed() < Duration::from_secs(30));
        assert!(checkpoint::latest(&run).is_ok());
    }

    #[test]
    fn ranks_with_different_settings_refuse_to_start() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let ranks: Vec<Command> = (0..2)
            .map(|rank| {
                let seed = (1 << 24) + rank; // the check compares a hash of the settings
                train(&config(8, 1), &run, &["--seed", &seed.to_string()])
            })
            .collect();
        let out = run_bounded(mpirun(&ranks));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("error: data-parallel run: the ranks disagree on the setting `seed`"),
            "{stderr}"
        );
        assert!(!run.exists(), "a run that never trained leaves no folder");
    }

    #[test]
    fn a_signal_to_one_rank_stops_every_rank_after_the_same_step() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        let (mpirun, ranks) = two_ranks_training(&run, 60);
        signal(ranks[1], "INT");
        let out = wait_until(mpirun, Instant::now() + LIMIT);
        assert_eq!(out.status.code(), Some(130), "{:?}", out.status);
        let s = summary(&run);
        assert_eq!(s.stopped_by.as_deref(), Some("SIGINT"));
        for rank in 0..2 {
            let stderr = rank_stderr(&out, rank);
            let line = format!("stopped by SIGINT at step {} of 100000", s.steps);
            assert!(stderr.contains(&line), "rank {rank}: {stderr}");
            assert!(stderr.contains("`mpirun -np 2 mlm-train train --resume "));
        }
        let latest = checkpoint::latest(&run).unwrap();
        assert!(
            latest.ends_with(format!("step-{:08}", s.steps)),
            "{latest:?}"
        );
    }
}
