//! Training by the clock (`train --time-budget`): a run ends on its own once its budget is
//! spent, with a final evaluation and checkpoint; its learning rate follows elapsed time
//! (warm-up, then decay to 0 at the budget), also across a resume; a run stopped by a signal
//! resumes with what is left of its budget, a spent one has nothing left to train and says
//! so, a new `--time-budget` extends it; durations that are no durations are refused before
//! anything is written. Times are checked against bounds, never exactly: the machine may be
//! busy.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{path_arg, resume_command, run_to_end, steps, summary, train_command};
use mlm_train::TrainConfig;
use mlm_train::run::checkpoint;
use mlm_train::run::report::{MetricsRow, read_metrics};
use mlm_train::train::lr::learning_rate_at;

/// The `mlm-train` binary of this build.
const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

/// How far past its budget a run may end: its last step, on a busy machine.
const SLACK_S: f64 = 1.5;

/// The micro config (steps of milliseconds), evaluated and checkpointed only at its end. Its
/// `max_steps` of 20 with 5 warm-up steps makes the warm-up a quarter of the budget.
fn config() -> TrainConfig {
    common::micro_config()
        .with_eval_every(100_000)
        .with_checkpoint_every(100_000)
}

fn train_rows(run: &Path) -> Vec<MetricsRow> {
    read_metrics(&run.join("metrics.csv"))
        .unwrap()
        .into_iter()
        .filter(|r| r.split == "train")
        .collect()
}

/// Each training row's learning rate is the budget schedule at a time between the end of
/// the previous step (`elapsed_before` for the first row) and the end of its own: the step
/// reads the clock in between. Within the rounding of metrics.csv (lr to 6 digits, elapsed
/// to 10 ms).
fn assert_follows_the_clock(rows: &[MetricsRow], elapsed_before: f64, budget: f64) {
    let config = config();
    let (peak, warmup) = (config.learning_rate, config.warmup_fraction());
    let lr = |progress: f64| learning_rate_at(peak, warmup, progress);
    let tolerance = 0.01 * peak;
    let mut before = elapsed_before;
    for row in rows {
        let (from, to) = (
            (before - 0.01) / budget,
            (row.elapsed_seconds + 0.01) / budget,
        );
        let (a, b) = (lr(from), lr(to));
        let high = if (from..=to).contains(&warmup) {
            peak
        } else {
            a.max(b)
        };
        assert!(
            row.learning_rate >= a.min(b) - tolerance && row.learning_rate <= high + tolerance,
            "step {} at {:.2} s: lr {:e} is not the schedule's between {before:.2} s and then",
            row.step,
            row.elapsed_seconds,
            row.learning_rate
        );
        before = row.elapsed_seconds;
    }
}

#[test]
fn a_run_by_the_clock_ends_on_its_own_with_a_final_checkpoint_and_its_lr_follows_the_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = run_to_end(train_command(&config(), &run, &["--time-budget", "3s"]));

    let s = summary(&run);
    assert_eq!(s.time_budget_seconds, Some(3.0));
    assert_eq!((s.stopped_by.as_deref(), s.max_steps), (None, 0));
    assert!(
        s.wall_time_seconds >= 3.0 && s.wall_time_seconds < 3.0 + SLACK_S,
        "{} s",
        s.wall_time_seconds
    );
    assert!(s.steps > 20, "max_steps ended it: {} steps", s.steps);
    assert!(s.final_valid_loss < s.unigram_entropy + 1.0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("trained by the clock: {} steps in 3s", s.steps)),
        "{stdout}"
    );
    // Not a terminal: plain lines that count time, not steps.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("step {}  loss ", s.steps)),
        "{stderr}"
    );
    assert!(stderr.contains(" of 3s"), "{stderr}");

    // The final evaluation and checkpoint are of the last step, and the plot is drawn.
    let all = read_metrics(&run.join("metrics.csv")).unwrap();
    assert_eq!(steps(&all), (1..=s.steps).collect::<Vec<_>>());
    let valid: Vec<usize> = all
        .iter()
        .filter(|r| r.split == "valid")
        .map(|r| r.step)
        .collect();
    assert_eq!(valid, [s.steps]);
    assert_eq!(
        checkpoint::list(&run).unwrap(),
        [checkpoint::checkpoint_dir(&run, s.steps)]
    );
    assert!(run.join("loss_curve.png").is_file());

    // The learning rate rises to near the peak, then falls to 0 at the step that found the
    // budget spent; every value is the schedule's at that step's time.
    let rows = train_rows(&run);
    let lrs: Vec<f64> = rows.iter().map(|r| r.learning_rate).collect();
    let top = (0..lrs.len())
        .max_by(|&i, &j| lrs[i].total_cmp(&lrs[j]))
        .unwrap();
    let peak = config().learning_rate;
    assert!(0 < top && top < lrs.len() - 1, "{lrs:?}");
    assert!(lrs[top] > 0.9 * peak && lrs[0] < lrs[top], "{lrs:?}");
    assert!(lrs[..=top].windows(2).all(|w| w[0] <= w[1]), "{lrs:?}");
    assert!(lrs[top..].windows(2).all(|w| w[0] >= w[1]), "{lrs:?}");
    assert_eq!(*lrs.last().unwrap(), 0.0);
    assert!(lrs[lrs.len() - 2] > 0.0, "it went on past the budget");
    assert_follows_the_clock(&rows, 0.0, 3.0);
}

#[test]
fn a_stopped_run_by_the_clock_resumes_with_what_is_left_of_its_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let budget = 5.0;
    // Stopped past half its budget, so that a resume that started the budget anew would
    // train far longer than what is left.
    let mut child = train_command(&config(), &run, &["--time-budget", "5s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while train_rows_or_none(&run).is_none_or(|rows| rows.last().unwrap().elapsed_seconds < 2.5) {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(started.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let stopped = summary(&run);
    assert_eq!(stopped.stopped_by.as_deref(), Some("SIGINT"));
    assert!(stopped.wall_time_seconds < budget, "{stopped:?}");
    assert!(stderr.contains("of its 5s time budget)"), "{stderr}");

    // The resume trains what is left: the run ends near its budget, not a budget later.
    run_to_end(resume_command(&run, &[]));
    let s = summary(&run);
    assert_eq!((s.stopped_by, s.time_budget_seconds), (None, Some(budget)));
    assert_eq!(s.last_segment.first_step, stopped.steps + 1);
    assert!(
        s.wall_time_seconds >= budget && s.wall_time_seconds < budget + SLACK_S,
        "{} s in all, {} s before the stop",
        s.wall_time_seconds,
        stopped.wall_time_seconds
    );
    let rows = train_rows(&run);
    assert_eq!(
        rows.iter().map(|r| r.step).collect::<Vec<_>>(),
        (1..=s.steps).collect::<Vec<_>>()
    );
    assert_follows_the_clock(&rows, 0.0, budget);
    assert_eq!(rows.last().unwrap().learning_rate, 0.0);

    // Spent: a resume says so and succeeds, touching nothing.
    let before = std::fs::read(run.join("summary.json")).unwrap();
    let out = run_to_end(resume_command(&run, &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing left to train"), "{stderr}");
    assert_eq!(std::fs::read(run.join("summary.json")).unwrap(), before);
    assert_eq!(
        checkpoint::latest(&run).unwrap(),
        checkpoint::checkpoint_dir(&run, s.steps)
    );
    // --max-steps does not end a run by the clock; a larger budget extends it.
    let out = resume_command(&run, &["--max-steps", "100000"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("trains by the clock"), "{stderr}");
    run_to_end(resume_command(&run, &["--time-budget", "6s"]));
    let extended = summary(&run);
    assert_eq!(extended.time_budget_seconds, Some(6.0));
    assert!(extended.steps > s.steps);
    assert!(extended.wall_time_seconds >= 6.0 && extended.wall_time_seconds < 6.0 + SLACK_S);
    let rows = train_rows(&run);
    assert_follows_the_clock(&rows[s.steps..], rows[s.steps - 1].elapsed_seconds, 6.0);
}

/// The training rows of `run` once its metrics.csv has one.
fn train_rows_or_none(run: &Path) -> Option<Vec<MetricsRow>> {
    let rows: Vec<MetricsRow> = read_metrics(&run.join("metrics.csv"))
        .ok()?
        .into_iter()
        .filter(|r| r.split == "train")
        .collect();
    (!rows.is_empty()).then_some(rows)
}

#[test]
fn a_time_budget_that_is_no_duration_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    for (budget, words) in [
        ("5", "not a duration"),
        ("soon", "not a duration"),
        ("0s", "trains nothing"),
    ] {
        let out = Command::new(BIN)
            .args(["train", "--run", path_arg(&run), "--time-budget", budget])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{budget}: {stderr}");
        assert!(stderr.contains(words), "{budget}: {stderr}");
        assert!(!run.exists());
    }
}
