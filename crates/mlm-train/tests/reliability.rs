//! The trainer under bad files, broken checkpoints, SIGKILL, write errors, non-finite
//! numbers and a long run; tied weights across save → load; bit-identical reruns.
//! Each case is a row of `docs/RELIABILITY.md`.

mod common;

use burn::tensor::{Bool, Int, Tensor, TensorData};
use common::{copy_dir, flex_device, micro_config, parameters, path_arg, steps, train_losses};
use mlm_train::config::config_with_overrides;
use mlm_train::data::Masking;
use mlm_train::run::TrainedRun;
use mlm_train::run::checkpoint;
use mlm_train::run::report::{MetricsRow, read_metrics};
use mlm_train::{BertConfig, BertForMaskedLm, ModelConfig, TrainError};
use mlm_train::{RunDir, TrainConfig, resume, train};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `mlm-train` binary of this build.
const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

/// Trains `config` into `dir/name` in this process.
fn trained(dir: &Path, name: &str, config: TrainConfig) -> PathBuf {
    let run = dir.join(name);
    train(config, &run, &flex_device(), "flex").unwrap();
    run
}

/// Runs the binary with `args`; `limit_blocks` caps the size of any file it writes
/// (`ulimit -f`, 512-byte blocks), with SIGXFSZ ignored so writes fail with EFBIG.
fn mlm_train(args: &[&str], limit_blocks: Option<u64>) -> Output {
    let limit = limit_blocks.map_or(String::new(), |b| format!("trap '' XFSZ; ulimit -f {b}; "));
    Command::new("sh")
        .arg("-c")
        .arg(format!("{limit}exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(args)
        .output()
        .unwrap()
}

/// The `.step-*.partial` folders of a run.
fn partial_checkpoints(run: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(run.join("checkpoints")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".partial"))
        .collect()
}

/// Rewrites a run's `config.json` through `edit`.
fn edit_config(run: &Path, edit: impl FnOnce(&mut TrainConfig)) {
    let dir = RunDir(run.to_path_buf());
    let mut config = dir.load_config().unwrap();
    edit(&mut config);
    std::fs::write(dir.config(), serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

#[test]
fn bad_corpus_and_tokenizer_files_are_typed_errors_and_leave_no_run_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    write(
        "headings/a.txt",
        b"CHAPTER 1. Loomings.\n\nETYMOLOGY.\n\n\n",
    );
    let binary = write("binary/a.txt", b"Call me Ishmael.\xff\xfe Some years ago.");
    let corrupt_json = write("tokenizer.json", b"{\"version\": \"1.0\", \"model\": ");
    let no_mask = write("vocab.txt", b"[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
    let run = root.join("run");
    let fail = |config: TrainConfig| {
        let err = train(config, &run, &flex_device(), "flex").unwrap_err();
        assert!(!run.exists(), "{err} left {} behind", run.display());
        err
    };
    let on = |corpus: PathBuf| {
        let mut config = micro_config();
        config.corpus = corpus;
        config
    };
    for corpus in [empty.clone(), root.join("headings")] {
        assert!(matches!(fail(on(corpus.clone())), TrainError::EmptyCorpus(p) if p == corpus));
    }
    assert!(matches!(
        fail(on(root.join("binary"))),
        TrainError::NotUtf8 { path, offset: 16 } if path == binary
    ));
    let tokenizer_error = |file: &Path| match fail(micro_config().with_tokenizer(Some(file.into())))
    {
        TrainError::Tokenizer { path, reason } => {
            assert_eq!(path, file);
            reason
        }
        other => panic!("{other}"),
    };
    assert!(tokenizer_error(&corrupt_json).contains("not a tokenizer.json"));
    assert_eq!(
        tokenizer_error(&no_mask),
        "the vocabulary has no [MASK] token"
    );
    assert_eq!(tokenizer_error(&root.join("missing.json")), "no such file");
    assert_eq!(
        tokenizer_error(&root),
        format!(
            "is a folder, not a tokenizer file: give the file in it, {}",
            corrupt_json.display()
        )
    );

    // The CLI's --config with invalid JSON is refused before anything is written.
    let bad_json = write("bad.json", b"{\"corpus\": \"x\", \"batch_size\": \"many\"}");
    let out = mlm_train(
        &[
            "train",
            "--config",
            path_arg(&bad_json),
            "--corpus",
            path_arg(&binary),
            "--run",
            path_arg(&run),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("invalid configuration") && stderr.contains("bad.json"),
        "{stderr}"
    );
    assert!(!run.exists());
}

/// The CLI refuses, with a one-line error and nothing written: a setting given with
/// `--resume` (the saved configuration applies, so it would be ignored), `--top-k 0` and a
/// sequence too short for `[CLS] token [SEP]`.
#[test]
fn the_cli_refuses_settings_on_resume_a_zero_top_k_and_a_too_short_sequence() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let (run_arg, corpus_arg) = (path_arg(&run), path_arg(tmp.path()));
    for (args, expected) in [
        (
            vec!["train", "--resume", run_arg, "--batch-size", "8"],
            "cannot be used with",
        ),
        (
            vec!["predict", "--run", run_arg, "--top-k", "0", "a [MASK]"],
            "--top-k",
        ),
        (
            vec![
                "train",
                "--run",
                run_arg,
                "--corpus",
                corpus_arg,
                "--max-seq-len",
                "2",
            ],
            "max_seq_len = 2 must be at least 3",
        ),
    ] {
        let out = mlm_train(&args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert!(!run.exists());
}

/// `--config FILE` may give only the fields to change; a misspelt field is an error that
/// names it; and a run directory written before the model's init flags or `masking` existed
/// still loads, with the flags off and token masking (as that run was made).
#[test]
fn partial_config_files_and_configs_of_older_runs_load() {
    let tmp = tempfile::tempdir().unwrap();
    let defaults = TrainConfig::new("corpus".into());
    let file = tmp.path().join("partial.json");
    std::fs::write(
        &file,
        r#"{"max_steps": 300, "model": {"hidden_size": 256}}"#,
    )
    .unwrap();
    let config = config_with_overrides(&file, &defaults).unwrap();
    assert_eq!((config.max_steps, config.model.hidden_size()), (300, 256));
    assert_eq!(config.batch_size, defaults.batch_size);
    let mut back = config.model.clone();
    *back.hidden_size_mut() = 128;
    assert_eq!(back, defaults.model);

    std::fs::write(&file, r#"{"model": {"hiden_size": 256}}"#).unwrap();
    match config_with_overrides(&file, &defaults) {
        Err(TrainError::Config(m)) => {
            assert!(
                m.to_string().ends_with("unknown field `model.hiden_size`"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }

    let old_run = tmp.path().join("old-run");
    std::fs::create_dir(&old_run).unwrap();
    let mut json = serde_json::to_value(&defaults).unwrap();
    let model = json["model"].as_object_mut().unwrap();
    model.remove("sinusoidal_positions");
    model.remove("local_attention_init");
    json.as_object_mut().unwrap().remove("masking");
    json.as_object_mut().unwrap().remove("log_every");
    std::fs::write(old_run.join("config.json"), json.to_string()).unwrap();
    let loaded = RunDir(old_run).load_config().unwrap();
    let ModelConfig::Bert(model) = &loaded.model else {
        panic!("an old run's model is a BERT")
    };
    assert!(!model.local_attention_init && !model.sinusoidal_positions);
    assert_eq!(loaded.max_steps, defaults.max_steps);
    assert_eq!(loaded.masking, Masking::Token);
    assert_eq!(loaded.log_every, defaults.log_every);

    std::fs::write(&file, r#"{"masking": "span"}"#).unwrap();
    let config = config_with_overrides(&file, &defaults).unwrap();
    assert_eq!(config.masking, Masking::Span);
    std::fs::write(&file, r#"{"masking": "spans"}"#).unwrap();
    match config_with_overrides(&file, &defaults) {
        Err(TrainError::Config(m)) => assert!(
            m.to_string()
                .contains("masking: unknown variant `spans`, expected `token` or `span`"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn broken_checkpoints_and_incompatible_configs_are_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained(
        tmp.path(),
        "run",
        micro_config().with_max_steps(10).with_checkpoint_every(10),
    );
    let step10 = |dir: &Path| checkpoint::checkpoint_dir(dir, 10);
    // Each case damages its own copy of the run, then resumes it.
    let case = |name: &str, damage: &dyn Fn(&Path)| {
        let dir = tmp.path().join(name);
        copy_dir(&run, &dir);
        damage(&dir);
        let complete = checkpoint::list(&dir).unwrap();
        let err = resume(&dir, Some(20), &flex_device(), "flex").unwrap_err();
        assert_eq!(
            checkpoint::list(&dir).unwrap(),
            complete,
            "{name}: checkpoints changed"
        );
        err
    };
    let checkpoint_reason = |err: TrainError, file: &str| match err {
        TrainError::Checkpoint { path, reason } => {
            assert!(path.ends_with(file), "{} is not {file}", path.display());
            reason
        }
        other => panic!("expected a checkpoint error on {file}, got {other}"),
    };
    let truncate = |file: &'static str| {
        move |dir: &Path| {
            let path = step10(dir).join(file);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        }
    };
    let reason = checkpoint_reason(case("truncated-model", &truncate("model.bpk")), "model.bpk");
    assert!(
        reason.contains("cannot be read: the file is missing, truncated or corrupt"),
        "{reason}"
    );
    checkpoint_reason(
        case("truncated-optimizer", &truncate("optimizer.bpk")),
        "optimizer.bpk",
    );
    let garbage = |dir: &Path| {
        let path = step10(dir).join("model.bpk");
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::write(&path, vec![0xa5; len]).unwrap();
    };
    checkpoint_reason(case("corrupt-model", &garbage), "model.bpk");
    let json = |file: &'static str| {
        move |dir: &Path| {
            let path = if file == "state.json" {
                step10(dir).join(file)
            } else {
                dir.join(file)
            };
            std::fs::write(path, b"{\"step\": 10, ").unwrap();
        }
    };
    for file in ["state.json", "config.json"] {
        assert!(
            matches!(case(file, &json(file)), TrainError::Json { path, .. } if path.ends_with(file))
        );
    }
    // A checkpoint that a kill interrupted is never loaded, even when it is the only one.
    let only_partial = |dir: &Path| {
        std::fs::rename(step10(dir), dir.join("checkpoints/.step-00000010.partial")).unwrap();
    };
    let reason = checkpoint_reason(case("only-partial", &only_partial), "checkpoints");
    assert!(
        reason.starts_with(
            "no complete checkpoint: the run stopped before its first checkpoint, so there is \
             nothing to resume; run the same `train --run"
        ),
        "{reason}"
    );

    // config.json edited after the checkpoint was written.
    let incompatible = |edit: fn(&mut TrainConfig)| move |dir: &Path| edit_config(dir, edit);
    let reason = checkpoint_reason(
        case("hidden", &incompatible(|c| *c.model.hidden_size_mut() = 24)),
        "model.bpk",
    );
    assert!(
        reason.starts_with("does not fit the model config.json builds")
            && reason.contains("shape mismatch")
            && reason.contains("[300, 24]")
            && reason.contains("[300, 16]"),
        "{reason}"
    );
    let reason = checkpoint_reason(
        case(
            "intermediate",
            &incompatible(|c| *c.model.intermediate_size_mut() = 48),
        ),
        "model.bpk",
    );
    assert!(reason.contains("intermediate"), "{reason}");
    let reason = checkpoint_reason(
        case(
            "layers",
            &incompatible(|c| *c.model.num_hidden_layers_mut() = 2),
        ),
        "model.bpk",
    );
    assert!(
        reason.starts_with("does not fit the model config.json builds")
            && reason.contains("Missing tensors")
            && reason.contains("layers.1."),
        "{reason}"
    );
    assert!(matches!(
        case("vocab", &incompatible(|c| *c.model.vocab_size_mut() = 301)),
        TrainError::Config(m) if m.to_string().contains("has 300 tokens, but config.json says vocab_size = 301")
    ));

    // A run of mlm-train 0.1 (Burn 0.21's `.mpk` records, which Burn 0.22 cannot read) is
    // refused by name, for resume and for predict / eval, with the way across.
    let made_by_0_1 = |dir: &Path| {
        for (new, old) in [
            ("model.bpk", "model.mpk"),
            ("optimizer.bpk", "optimizer.mpk"),
        ] {
            std::fs::rename(step10(dir).join(new), step10(dir).join(old)).unwrap();
        }
    };
    let is_0_1 = |reason: &str| {
        reason.contains("was written by mlm-train 0.1 (Burn 0.21)")
            && reason.contains("export-hf --run RUN HF_DIR")
            && reason.contains("import-hf HF_DIR --out NEW_RUN")
    };
    let reason = checkpoint_reason(case("v0.1", &made_by_0_1), "model.mpk");
    assert!(is_0_1(&reason), "{reason}");
    match TrainedRun::load(&tmp.path().join("v0.1"), &flex_device()).err() {
        Some(TrainError::Checkpoint { reason, .. }) => assert!(is_0_1(&reason), "{reason}"),
        other => panic!("expected the 0.1 refusal, got {other:?}"),
    }

    // A folder that is not a run is named as such, for resume and for predict / eval.
    let not_a_run = tmp.path().join("not-a-run");
    std::fs::create_dir(&not_a_run).unwrap();
    let is_not_a_run = |err: TrainError| matches!(err, TrainError::InvalidInput(m) if m.contains("is not a run directory: it has no config.json"));
    assert!(is_not_a_run(
        resume(&not_a_run, Some(20), &flex_device(), "flex").unwrap_err()
    ));
    assert!(is_not_a_run(
        TrainedRun::load(&not_a_run, &flex_device()).err().unwrap()
    ));

    // Dropout 1 would zero every activation and scale by 1 / 0: refused up front.
    let reason = BertConfig::new(300)
        .with_hidden_dropout_prob(1.0)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        reason.contains("is not a dropout probability in [0, 1)"),
        "{reason}"
    );

    // Fill-mask on a text longer than the position table (32) is refused.
    let trained = TrainedRun::load(&run, &flex_device()).unwrap();
    let long = format!("{} [MASK].", "the whale ".repeat(20));
    assert!(matches!(
        trained.fill_mask(&long, 3, &flex_device()),
        Err(TrainError::InvalidInput(m)) if m.contains("longer than the model's 32 positions")
    ));
}

#[test]
fn a_write_error_while_saving_a_checkpoint_is_typed_and_keeps_the_previous_one() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained(
        tmp.path(),
        "run",
        micro_config().with_max_steps(10).with_checkpoint_every(10),
    );
    let model_bytes = std::fs::metadata(checkpoint::checkpoint_dir(&run, 10).join("model.bpk"))
        .unwrap()
        .len();
    // Files may grow to a quarter of a model (half if `sh` counts 1024-byte blocks):
    // config.json and metrics.csv fit, model.bpk does not.
    let limit_blocks = model_bytes / 4 / 512;
    assert!(
        limit_blocks * 512 > 8192,
        "model.bpk is only {model_bytes} bytes"
    );
    let out = mlm_train(
        &["train", "--resume", path_arg(&run), "--max-steps", "20"],
        Some(limit_blocks),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: checkpoint") && stderr.contains(".step-00000020.partial/model.bpk"),
        "{stderr}"
    );
    assert_eq!(
        checkpoint::list(&run).unwrap(),
        [checkpoint::checkpoint_dir(&run, 10)]
    );
    assert!(partial_checkpoints(&run).is_empty());
    // Without the limit the run resumes from step 10 and finishes.
    let out = mlm_train(&["train", "--resume", path_arg(&run)], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_metrics(&run.join("metrics.csv")).unwrap();
    assert_eq!(steps(&rows), (1..=20).collect::<Vec<_>>());
}

#[test]
fn sigkill_mid_run_and_mid_checkpoint_resumes_from_the_last_complete_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let config_file = tmp.path().join("config.json");
    // Long enough to be killed (about 5 s), short enough to resume to the end: the
    // learning-rate schedule depends on max_steps, so the resume keeps it.
    let config = micro_config()
        .with_max_steps(1000)
        .with_checkpoint_every(5)
        .with_eval_every(500);
    std::fs::write(&config_file, serde_json::to_string(&config).unwrap()).unwrap();
    let mut child = Command::new(BIN)
        .args(["train", "--config", path_arg(&config_file)])
        .args([
            "--corpus",
            path_arg(&config.corpus),
            "--run",
            path_arg(&run),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once two checkpoints exist, kill at the first sight of a checkpoint being written
    // (or after 1 s of trying, about 40 checkpoints).
    let started = Instant::now();
    let mut two_checkpoints = None;
    let caught_mid_write = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it was killed"
        );
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no checkpoint"
        );
        if two_checkpoints.is_none() && checkpoint::list(&run).is_ok_and(|l| l.len() >= 2) {
            two_checkpoints = Some(Instant::now());
        }
        if let Some(since) = two_checkpoints {
            if !partial_checkpoints(&run).is_empty() {
                break true;
            }
            if since.elapsed() > Duration::from_secs(1) {
                break false;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    println!(
        "killed {} a checkpoint write",
        if caught_mid_write {
            "during"
        } else {
            "outside"
        }
    );

    // Every complete checkpoint is whole: its model and state load, and its name is its step.
    let complete = checkpoint::list(&run).unwrap();
    let config = RunDir(run.clone()).load_config().unwrap();
    for dir in &complete {
        checkpoint::load_model(dir, &config.model, &flex_device()).unwrap();
        let state: checkpoint::RunState =
            serde_json::from_str(&std::fs::read_to_string(dir.join("state.json")).unwrap())
                .unwrap();
        assert_eq!(*dir, checkpoint::checkpoint_dir(&run, state.step));
    }
    let last = complete.last().unwrap();
    let resumed_from: usize = last
        .to_string_lossy()
        .rsplit('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // What a kill during a checkpoint write leaves, whether or not this kill caught one: a
    // partial folder with a truncated model and a state far ahead. Loading it would fail
    // or jump to step 99 999.
    let fake = run.join("checkpoints/.step-00099999.partial");
    std::fs::create_dir_all(&fake).unwrap();
    let model = std::fs::read(last.join("model.bpk")).unwrap();
    std::fs::write(fake.join("model.bpk"), &model[..model.len() / 3]).unwrap();
    std::fs::write(
        fake.join("state.json"),
        b"{\"step\": 99999, \"elapsed_seconds\": 0.0, \"tokens_seen\": 0}",
    )
    .unwrap();
    // And a metrics row cut short by the kill.
    let before = read_metrics(&run.join("metrics.csv")).unwrap();
    let killed_at = *steps(&before).last().unwrap();
    assert!(killed_at >= resumed_from);
    let mut csv = std::fs::read(run.join("metrics.csv")).unwrap();
    csv.extend_from_slice(format!("{},train,4.12", killed_at + 1).as_bytes());
    std::fs::write(run.join("metrics.csv"), csv).unwrap();

    let until = 1000;
    let out = mlm_train(&["train", "--resume", path_arg(&run)], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        partial_checkpoints(&run).is_empty(),
        "the leftover was not removed"
    );
    let after = read_metrics(&run.join("metrics.csv")).unwrap();
    // Metrics continue from the checkpoint step: each step once, the old rows up to it kept.
    assert_eq!(steps(&after), (1..=until).collect::<Vec<_>>());
    let upto = |rows: &[MetricsRow], step| {
        rows.iter()
            .filter(|r| r.step <= step)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(upto(&after, resumed_from), upto(&before, resumed_from));
    // Training continues from the checkpoint: the steps the killed run had already done
    // after it come out the same again.
    let before = train_losses(&before);
    for (step, loss) in train_losses(&after) {
        if step > resumed_from
            && let Some((_, old)) = before.iter().find(|(s, _)| *s == step)
        {
            assert!(
                (loss - old).abs() <= 1e-5 * old,
                "step {step}: {loss} after the resume, {old} before the kill"
            );
        }
    }
}

#[test]
fn two_runs_with_one_seed_and_tokenizer_are_bit_identical() {
    // docs/RELIABILITY.md, "Determinism": both runs use the first run's tokenizer.json (as
    // a resume does), so this checks the training alone: every loss and every weight agrees
    // bit for bit. `processes.rs` checks fresh runs, tokenizer included, in two processes.
    let tmp = tempfile::tempdir().unwrap();
    let first = trained(
        tmp.path(),
        "first",
        micro_config().with_max_steps(1).with_warmup_steps(1),
    );
    let config = || {
        micro_config()
            .with_tokenizer(Some(first.join("tokenizer.json")))
            .with_max_steps(20)
            .with_checkpoint_every(20)
    };
    let a = trained(tmp.path(), "a", config());
    let b = trained(tmp.path(), "b", config());
    let rows = |run: &Path| read_metrics(&run.join("metrics.csv")).unwrap();
    let (rows_a, rows_b) = (rows(&a), rows(&b));
    assert_eq!(rows_a.len(), 22, "20 training rows and 2 validation rows");
    let key = |r: &MetricsRow| (r.step, r.split.clone(), r.learning_rate);
    let mut max_relative: f64 = 0.0;
    for (x, y) in rows_a.iter().zip(&rows_b) {
        assert_eq!(key(x), key(y));
        max_relative = max_relative.max((x.loss - y.loss).abs() / x.loss);
    }
    let model = RunDir(a.clone()).load_config().unwrap().model;
    let weights = |run: &Path| {
        let dir = checkpoint::checkpoint_dir(run, 20);
        parameters(&checkpoint::load_model(&dir, &model, &flex_device()).unwrap())
    };
    let max_weight = weights(&a)
        .iter()
        .zip(weights(&b))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    println!(
        "20 steps: max relative loss difference {max_relative:.1e}, max weight difference {max_weight:.1e}"
    );
    assert_eq!(max_relative, 0.0);
    assert_eq!(max_weight, 0.0);
    // A different seed is a different run. (Not its first loss alone: at initialisation
    // every loss is within about 0.02 of ln(vocab), so two seeds can agree there to 1e-3.)
    let c = trained(tmp.path(), "c", config().with_seed(7));
    let diff = rows(&c)
        .iter()
        .zip(&rows_a)
        .map(|(x, y)| (x.loss - y.loss).abs())
        .fold(0.0, f64::max);
    assert!(diff > 1e-2, "seed 7's losses are seed 42's (within {diff})");
}

#[test]
fn a_non_finite_step_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Learning rate 1e30 from the first step: after one update the weights are ~1e30 and
    // the next forward pass overflows f32.
    let config = micro_config()
        .with_learning_rate(1e30)
        .with_warmup_steps(0)
        .with_checkpoint_every(1);
    let err = train(config.clone(), &run, &flex_device(), "flex").unwrap_err();
    let TrainError::NonFinite {
        step,
        quantity,
        value,
    } = err
    else {
        panic!("expected NonFinite, got {err}");
    };
    println!("non-finite {quantity} {value} at step {step}");
    assert_eq!((step, quantity), (2, "loss"));
    assert!(value.is_nan());
    assert_eq!(
        checkpoint::list(&run).unwrap(),
        [checkpoint::checkpoint_dir(&run, 1)]
    );
    let rows = read_metrics(&run.join("metrics.csv")).unwrap();
    assert_eq!(steps(&rows), [1]);
    assert!(!run.join("summary.json").exists());

    // Failing before the first checkpoint leaves no half-made run that would refuse a rerun.
    let early = tmp.path().join("early");
    let config = config.with_checkpoint_every(100);
    let err = train(config, &early, &flex_device(), "flex").unwrap_err();
    assert!(
        matches!(err, TrainError::NonFinite { step: 2, .. }),
        "{err}"
    );
    assert!(!early.exists());
}

#[test]
fn an_update_that_overflows_the_weights_is_never_checkpointed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // 1e39 is finite in f64 (the configuration) but not in f32: the first update makes the
    // weights non-finite while that step's loss and gradient norm are finite.
    let config = micro_config()
        .with_learning_rate(1e39)
        .with_warmup_steps(0)
        .with_checkpoint_every(1);
    let err = train(config, &run, &flex_device(), "flex").unwrap_err();
    assert!(
        matches!(
            err,
            TrainError::NonFinite {
                step: 1,
                quantity: "weights",
                ..
            }
        ),
        "{err}"
    );
    // Failing before the first checkpoint leaves no half-made run behind.
    assert!(!run.exists());
}

#[test]
fn two_thousand_steps_of_the_micro_config_stay_finite() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let run = trained(
        tmp.path(),
        "run",
        micro_config()
            .with_max_steps(2000)
            .with_eval_every(500)
            .with_checkpoint_every(1000),
    );
    println!("2000 steps in {:.1} s", started.elapsed().as_secs_f64());
    let rows = read_metrics(&run.join("metrics.csv")).unwrap();
    let losses = train_losses(&rows);
    assert_eq!(losses.len(), 2000);
    assert!(
        rows.iter()
            .all(|r| r.loss.is_finite() && r.accuracy.is_finite())
    );
    let mean = |r: &[(usize, f64)]| r.iter().map(|x| x.1).sum::<f64>() / r.len() as f64;
    let (first, last) = (mean(&losses[..50]), mean(&losses[1950..]));
    assert!(last < first - 0.3, "loss {first:.3} → {last:.3}");
}

#[test]
fn the_tied_decoder_stays_the_embedding_across_save_load_and_training() {
    let tmp = tempfile::tempdir().unwrap();
    let run = trained(
        tmp.path(),
        "run",
        micro_config().with_max_steps(10).with_checkpoint_every(10),
    );
    // Ten more optimizer steps after loading the step-10 checkpoint.
    resume(&run, Some(20), &flex_device(), "flex").unwrap();
    let config = RunDir(run.clone()).load_config().unwrap();
    let device = flex_device();
    let load = |step| {
        checkpoint::load_model(
            &checkpoint::checkpoint_dir(&run, step),
            &config.model,
            &device,
        )
        .unwrap()
        .as_bert()
        .expect("a BERT")
        .clone()
    };
    let (at10, at20) = (load(10), load(20));
    for model in [&at10, &at20] {
        assert!(
            model.head.decoder.is_none(),
            "a decoder of its own was saved"
        );
    }
    let embedding = |m: &BertForMaskedLm| {
        m.embeddings
            .word_embeddings
            .weight
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()
    };
    assert_ne!(embedding(&at10), embedding(&at20), "the embedding trained");
    // The logits are the transformed hidden states times the loaded embedding: the head's
    // decoder is that very tensor, so |decoder - embedding| = 0.
    let ids: Vec<i64> = vec![2, 40, 41, 42, 4, 3];
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, 6]), &device);
    let segments = Tensor::<2, Int>::zeros([1, 6], &device);
    let padding = Tensor::<2, Bool>::from_data(TensorData::new(vec![false; 6], [1, 6]), &device);
    let logits = at20
        .forward(input.clone(), segments.clone(), padding.clone())
        .unwrap();
    let hidden = at20.encode(input, segments, padding);
    let transformed = at20.head.transform.as_ref().unwrap().forward(hidden);
    let decoded = burn::tensor::module::linear(
        transformed,
        at20.embeddings.word_embeddings.weight.val().transpose(),
        Some(at20.head.bias.val()),
    );
    let max_diff: f32 = (logits - decoded).abs().max().into_scalar();
    assert_eq!(max_diff, 0.0);
}
