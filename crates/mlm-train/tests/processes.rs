//! The `mlm-train` binary as separate processes: two runs of one command are identical,
//! Ctrl-C and SIGTERM stop with a checkpoint that resumes bit-identically, a second signal
//! aborts without a half-written checkpoint, one process writes a run directory, and the
//! bad flags of a new user's first tries are refused before anything is written.
//! Each case is a row of `docs/RELIABILITY.md`.

mod common;

use common::{
    flex_device, parameters, path_arg, resume_command, run_to_end, steps, summary, train_command,
};
use mlm_train::run::checkpoint;
use mlm_train::run::report::{MetricsRow, Summary, read_metrics};
use mlm_train::{RunDir, TrainConfig};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `mlm-train` binary of this build.
const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

/// The micro config for `max_steps`, evaluated and checkpointed at the end.
fn micro_config(max_steps: usize) -> TrainConfig {
    common::micro_config()
        .with_max_steps(max_steps)
        .with_eval_every(max_steps)
        .with_checkpoint_every(max_steps)
}

/// The summary's numbers, less the timings.
fn results(s: &Summary) -> Vec<f64> {
    let split = [
        s.valid_mask_loss,
        s.valid_random_loss,
        s.valid_unchanged_loss,
    ];
    let mut v = vec![
        s.final_valid_loss,
        s.valid_accuracy,
        s.unigram_entropy,
        s.most_frequent_token_accuracy,
        s.steps as f64,
    ];
    v.extend(split.map(Option::unwrap));
    v
}

/// The training and validation rows without their timing columns.
fn metrics(run: &Path) -> Vec<(usize, String, f64, f64, f64)> {
    read_metrics(&run.join("metrics.csv"))
        .unwrap()
        .into_iter()
        .map(|r: MetricsRow| (r.step, r.split, r.loss, r.accuracy, r.learning_rate))
        .collect()
}

/// Every weight of the checkpoint at `step` (the files themselves differ: Burn records
/// hold parameter ids drawn per process).
fn weights(run: &Path, step: usize) -> Vec<f32> {
    let config = RunDir(run.to_path_buf()).load_config().unwrap();
    let dir = checkpoint::checkpoint_dir(run, step);
    parameters(&checkpoint::load_model(&dir, &config.model, &flex_device()).unwrap())
}

/// `mlm-train train --resume RUN [extra]`, which must succeed.
fn resume(run: &Path, extra: &[&str]) {
    run_to_end(resume_command(run, extra));
}

#[test]
fn the_same_command_twice_gives_a_byte_identical_tokenizer_and_the_same_numbers() {
    // Before the fix, tokenizer.json differed between processes (`tokenizers` counted
    // words into a map keyed at random per process): this is two processes, not two calls.
    let tmp = tempfile::tempdir().unwrap();
    let backends: &[&str] = if cfg!(feature = "ndarray") {
        &["ndarray", "flex"]
    } else {
        &["flex"]
    };
    for &backend in backends {
        let runs: Vec<PathBuf> = ["a", "b"]
            .iter()
            .map(|name| tmp.path().join(format!("{backend}-{name}")))
            .collect();
        for run in &runs {
            let out = run_to_end(train_command(
                &micro_config(10).with_vocab_size(1000),
                run,
                &["--backend", backend],
            ));
            // Not a terminal: plain progress lines, from data preparation on.
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.starts_with("preparing "), "{stderr}");
            assert!(stderr.contains("step 10/10  loss "), "{stderr}");
        }
        let read = |run: &PathBuf, file| std::fs::read(run.join(file)).unwrap();
        assert!(
            read(&runs[0], "tokenizer.json") == read(&runs[1], "tokenizer.json"),
            "{backend}: the two tokenizer.json differ"
        );
        assert_eq!(
            results(&summary(&runs[0])),
            results(&summary(&runs[1])),
            "{backend}"
        );
        assert_eq!(metrics(&runs[0]), metrics(&runs[1]), "{backend}");
        assert!(weights(&runs[0], 10) == weights(&runs[1], 10), "{backend}");
    }
}

/// Starts a long run of the micro config, waits until it has trained past `after_step`
/// (from its metrics.csv), and returns it.
fn running(config: &TrainConfig, run: &Path, after_step: usize) -> Child {
    let mut child = train_command(config, run, &[] as &[&str])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while read_metrics(&run.join("metrics.csv")).map_or(true, |rows| rows.len() <= after_step) {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(started.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

fn signal(child: &Child, name: &str) {
    // The shell's builtin `kill`: no package needed beside `sh`.
    let status = Command::new("sh")
        .args(["-c", &format!("kill -{name} {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn ctrl_c_and_sigterm_stop_with_a_checkpoint_and_the_resume_is_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let config = micro_config(600).with_warmup_steps(10);
    let whole = tmp.path().join("whole");
    run_to_end(train_command(&config, &whole, &[] as &[&str]));

    for (name, status) in [("INT", 130), ("TERM", 143)] {
        let run = tmp.path().join(name);
        let child = running(&config, &run, 30);
        signal(&child, name);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{stderr}");
        let stopped = summary(&run);
        assert_eq!(stopped.stopped_by.as_deref(), Some(&*format!("SIG{name}")));
        assert!(stopped.steps < 600, "it ran to the end");
        assert!(stderr.contains(&format!("stopped by SIG{name} at step {}", stopped.steps)));
        // The checkpoint is the step it stopped at, complete, and the plot is drawn.
        let newest = checkpoint::latest(&run).unwrap();
        assert_eq!(newest, checkpoint::checkpoint_dir(&run, stopped.steps));
        assert!(run.join("loss_curve.png").is_file());

        resume(&run, &[]);
        assert_eq!(metrics(&run), metrics(&whole), "SIG{name}");
        assert_eq!(results(&summary(&run)), results(&summary(&whole)));
        let last = summary(&run).last_segment;
        assert_eq!(
            (last.first_step, last.steps),
            (stopped.steps + 1, 600 - stopped.steps)
        );
        assert!(
            weights(&run, 600) == weights(&whole, 600),
            "SIG{name}: final weights"
        );
    }
}

#[test]
fn a_second_signal_aborts_at_once_and_leaves_no_checkpoint_a_resume_would_load() {
    let tmp = tempfile::tempdir().unwrap();
    // Checkpoints at every step, and steps long enough (tens of ms) that the second
    // signal lands while the first is still being honoured.
    let mut config = micro_config(2000)
        .with_checkpoint_every(1)
        .with_batch_size(64);
    *config.model.hidden_size_mut() = 64;
    *config.model.intermediate_size_mut() = 256;
    let run = tmp.path().join("run");
    let mut child = running(&config, &run, 20);
    signal(&child, "INT");
    // The second signal once the first is acknowledged (two signals sent together could
    // be merged into one), while the step, checkpoint, evaluation and plot still run.
    let mut stderr = String::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while !stderr.contains("SIGINT: stopping") {
        stderr += &lines.next().expect("no acknowledgment").unwrap();
    }
    signal(&child, "INT");
    for line in lines {
        stderr += &line.unwrap();
    }
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(mlm_train::train::stop::ABORTED),
        "{stderr}"
    );
    assert!(stderr.contains("SIGINT: aborting"), "{stderr}");
    let newest = checkpoint::latest(&run).unwrap();
    resume(&run, &["--max-steps", "60"]);
    assert_eq!(
        steps(&read_metrics(&run.join("metrics.csv")).unwrap()),
        (1..=60).collect::<Vec<_>>(),
        "resumed from {}",
        newest.display()
    );
}

#[test]
fn a_second_writer_of_a_run_is_refused_naming_the_first_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let config = micro_config(100_000).with_checkpoint_every(5);
    let run = tmp.path().join("run");
    let mut first = running(&config, &run, 5);
    let files = |run: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(run)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = (files(&run), std::fs::read(run.join("config.json")).unwrap());
    for second in [
        vec!["train", "--resume", path_arg(&run)],
        vec!["train", "--resume", path_arg(&run), "--max-steps", "200000"],
    ] {
        let out = Command::new(BIN).args(&second).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains(&format!("in use by process {}", first.id())),
            "{stderr}"
        );
    }
    // A new run and a resume of a folder whose first run has just started.
    let fresh = tmp.path().join("fresh");
    let mut preparing = train_command(&micro_config(100_000), &fresh, &[] as &[&str])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while !fresh.join(".lock").is_file()
        || std::fs::read_to_string(fresh.join(".lock"))
            .unwrap()
            .is_empty()
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    for mut second in [
        train_command(&micro_config(10), &fresh, &[] as &[&str]),
        resume_command(&fresh, &[]),
    ] {
        let out = second.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let holder = format!("in use by process {}", preparing.id());
        assert!(stderr.contains(&holder), "{stderr}");
    }
    assert!(
        preparing.try_wait().unwrap().is_none(),
        "the first run was disturbed"
    );
    preparing.kill().unwrap();
    preparing.wait().unwrap();

    assert!(
        first.try_wait().unwrap().is_none(),
        "the first run was disturbed"
    );
    assert_eq!(
        (files(&run), std::fs::read(run.join("config.json")).unwrap()),
        before
    );
    // The operating system releases the lock of a killed holder: no stale lock.
    first.kill().unwrap();
    first.wait().unwrap();
    let out = Command::new(BIN)
        .args(["train", "--resume", path_arg(&run), "--max-steps", "200000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut out = out;
    let still_running = out.try_wait().unwrap().is_none();
    out.kill().unwrap();
    let stderr = String::from_utf8_lossy(&out.wait_with_output().unwrap().stderr).to_string();
    assert!(
        still_running,
        "the resume after the kill was refused: {stderr}"
    );
}

/// `mlm-train ARGS` in `dir`.
fn mlm_train_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_new_users_first_mistakes_are_one_line_errors_that_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let corpus = common::corpus();
    let bad_type = dir.join("bad.json");
    std::fs::write(&bad_type, br#"{"max_steps": "20"}"#).unwrap();
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--corpus", path_arg(&corpus), "--run", "run"];
        args.extend(extra);
        mlm_train_in(dir, &args)
    };
    for (out, expected) in [
        (
            train(&["--max-seq-len", "100000"]),
            "a training step needs about",
        ),
        (
            train(&["--config", path_arg(&bad_type)]),
            "bad.json: max_steps: invalid type: string \"20\", expected usize",
        ),
        (
            train(&["--max-steps", "20"]),
            "warmup_steps = 100 exceeds max_steps = 20",
        ),
        (
            train(&["--dropout", "-0.1"]),
            "hidden_dropout_prob = -0.1 is not a dropout probability",
        ),
        (
            mlm_train_in(dir, &["fetch-corpus", "--corpus", path_arg(&corpus)]),
            "is not the fetched corpus",
        ),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            !dir.join("run").exists(),
            "{expected}: a run folder was left"
        );
    }
    // A config file's corpus is used (it was replaced by the default, then fetched).
    let with_corpus = dir.join("with-corpus.json");
    std::fs::write(
        &with_corpus,
        serde_json::to_string(&micro_config(2).with_warmup_steps(1)).unwrap(),
    )
    .unwrap();
    let out = mlm_train_in(
        dir,
        &["train", "--config", path_arg(&with_corpus), "--run", "run"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.join("data").exists(), "the default corpus was fetched");
    assert_eq!(summary(&dir.join("run")).steps, 2);
    // The memory estimate names its size and the attention's share of it.
    let out = train(&["--max-seq-len", "100000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("GiB of it attention scores"), "{stderr}");
    // --help shows the effective defaults, though the flags override --config.
    let help = mlm_train_in(dir, &["train", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for default in [
        "[default: 2400]",
        "[default: 0.002]",
        "[default: 100]",
        "[default: 42]",
    ] {
        assert!(help.contains(default), "{default} missing from:\n{help}");
    }
}

#[test]
fn a_run_killed_before_its_first_checkpoint_or_stopped_while_preparing_starts_anew() {
    let tmp = tempfile::tempdir().unwrap();
    // SIGKILL after some steps, before the only checkpoint (at the end).
    let config = micro_config(100_000);
    let run = tmp.path().join("killed");
    let mut child = running(&config, &run, 5);
    child.kill().unwrap();
    child.wait().unwrap();
    let out = resume_command(&run, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nothing to resume; run the same `train --run"),
        "{stderr}"
    );
    // The same command starts it anew instead of "already holds a run".
    run_to_end(train_command(&micro_config(10), &run, &[] as &[&str]));
    assert_eq!(summary(&run).steps, 10);

    // SIGINT while the data are prepared (a corpus 30 times the fixture's): exit 130,
    // nothing trained, and no run folder left.
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    for copy in 0..30 {
        for entry in std::fs::read_dir(common::corpus()).unwrap() {
            let path = entry.unwrap().path();
            let name = format!("{copy}-{}", path.file_name().unwrap().to_string_lossy());
            std::fs::copy(&path, corpus.join(name)).unwrap();
        }
    }
    let run = tmp.path().join("preparing");
    let mut config = micro_config(10);
    config.corpus = corpus;
    let child = train_command(&config, &run, &[] as &[&str])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while !run.join(".lock").is_file() {
        std::thread::sleep(Duration::from_millis(1));
    }
    signal(&child, "INT");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("stopped by SIGINT before training step 1"),
        "{stderr}"
    );
    assert!(!run.exists(), "a run folder was left behind");
}
