//! ModernBERT's recipe on the micro config: a run with warmup-stable-decay and a masking
//! rate that falls over the run keeps both in its `config.json`, follows them step by step,
//! resumes mid-schedule bit for bit, and still grades held-out batches at 15 %; each step's
//! batches select at that step's scheduled rate; the flags set the schedules, and bad values
//! are refused by name before anything is written.

mod common;

use std::path::Path;

use common::{
    copy_dir, flex_device, micro_config, parameters, path_arg, run_to_end, train_command,
};
use mlm_train::config::{LrSchedule, ScheduleShape};
use mlm_train::data::SubwordTokenizer;
use mlm_train::run::TrainedRun;
use mlm_train::run::checkpoint;
use mlm_train::run::report::read_metrics;
use mlm_train::train::lr::learning_rate;
use mlm_train::{RunDir, TrainConfig, Trainer, resume, train};

/// 20 steps: 5 to warm up, the peak to step 14, a `1 − √t` decay over the last 6 (a 0.3
/// share); 40 % of the tokens selected at step 1, falling along a cosine to 10 % at the end.
/// Checkpointed and evaluated every 10 steps.
fn scheduled() -> TrainConfig {
    micro_config()
        .with_lr_schedule(LrSchedule::WarmupStableDecay)
        .with_lr_decay_fraction(0.3)
        .with_lr_decay_shape(ScheduleShape::OneMinusSqrt)
        .with_mlm_probability(0.4)
        .with_mlm_probability_final(Some(0.1))
        .with_mlm_probability_schedule(ScheduleShape::Cosine)
}

/// The metrics rows without their timing columns.
fn metrics(run: &Path) -> Vec<(usize, String, f64, f64, f64)> {
    read_metrics(&run.join("metrics.csv"))
        .unwrap()
        .into_iter()
        .map(|r| (r.step, r.split, r.loss, r.accuracy, r.learning_rate))
        .collect()
}

/// Every weight of the run's checkpoint at `step`.
fn weights(run: &Path, step: usize) -> Vec<f32> {
    let config = RunDir(run.to_path_buf()).load_config().unwrap();
    let dir = checkpoint::checkpoint_dir(run, step);
    parameters(&checkpoint::load_model(&dir, &config.model, &flex_device()).unwrap())
}

#[test]
fn a_run_with_both_schedules_resumes_mid_schedule_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let (device, whole) = (flex_device(), tmp.path().join("whole"));
    train(scheduled(), &whole, &device, "flex").unwrap();

    // config.json keeps the schedules.
    let saved = RunDir(whole.clone()).load_config().unwrap();
    assert_eq!(saved.lr_schedule, LrSchedule::WarmupStableDecay);
    assert_eq!(
        (saved.lr_decay_fraction, saved.lr_decay_shape),
        (0.3, ScheduleShape::OneMinusSqrt)
    );
    assert_eq!(saved.mlm_probability_final, Some(0.1));
    assert_eq!(saved.mlm_probability_schedule, ScheduleShape::Cosine);

    // The learning rate held the peak from step 5 to 14, then fell to 0 at step 20.
    let rows = metrics(&whole);
    let train_lr: Vec<f64> = rows
        .iter()
        .filter(|r| r.1 == "train")
        .map(|r| r.4)
        .collect();
    let peak = saved.learning_rate;
    assert!(train_lr[4..14].iter().all(|&lr| lr == peak), "{train_lr:?}");
    assert!(train_lr[14] < peak && train_lr[19] == 0.0, "{train_lr:?}");
    for (step, &lr) in (1..).zip(&train_lr) {
        let expected = learning_rate(&saved, step);
        assert!((lr - expected).abs() <= 1e-6 * peak, "step {step}: {lr}");
    }

    // Interrupted after step 10, in the held peak and half-way down the masking rate, and
    // resumed: the same losses, accuracies, learning rates and weights, bit for bit.
    let interrupted = tmp.path().join("interrupted");
    copy_dir(&whole, &interrupted);
    std::fs::remove_dir_all(checkpoint::checkpoint_dir(&interrupted, 20)).unwrap();
    resume(&interrupted, None, &device, "flex").unwrap();
    assert_eq!(metrics(&interrupted), rows);
    assert!(weights(&interrupted, 20) == weights(&whole, 20), "weights");

    // Held-out batches are graded at 15 % whatever the training rate: as many graded
    // tokens as a run at the default rate on the same held-out split.
    let default = tmp.path().join("default");
    let tokenizer = whole.join("tokenizer.json");
    let config = micro_config()
        .with_tokenizer(Some(tokenizer))
        .with_max_steps(2)
        .with_warmup_steps(1);
    train(config, &default, &device, "flex").unwrap();
    let graded = |run: &Path| {
        let trained = TrainedRun::load(run, &device).unwrap();
        trained.evaluate(None, &device).unwrap().n_masked
    };
    let (scheduled_graded, default_graded) = (graded(&whole), graded(&default));
    assert!(scheduled_graded > 0);
    assert_eq!(scheduled_graded, default_graded);
}

/// Each step of a run of 4 steps masks its batch of 64 × 30 candidate tokens at its rate:
/// the share of the run done when the step begins, `(step − 1) / 4`, of the way from 40 %
/// to 10 % (linear: 40, 32.5, 25 and 17.5 %), within 4σ of the binomial draw; without a
/// schedule, 40 % throughout.
#[test]
fn each_step_selects_tokens_at_its_scheduled_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let device = flex_device();
    let run = tmp.path().join("run");
    let one_step = micro_config().with_max_steps(1).with_warmup_steps(1);
    train(one_step, &run, &device, "flex").unwrap();
    let tokenizer = SubwordTokenizer::from_file(&run.join("tokenizer.json")).unwrap();
    let vocab = tokenizer.vocab_size();
    let words: Vec<u32> = (0..vocab as u32)
        .filter(|id| !tokenizer.special_ids.contains(id))
        .collect();
    let sequences: Vec<Vec<u32>> = (0..64)
        .map(|s| {
            let middle = (0..30).map(|i| words[(s * 31 + i * 7) % words.len()]);
            let mut ids = vec![tokenizer.cls_id];
            ids.extend(middle);
            ids.push(tokenizer.sep_id);
            ids
        })
        .collect();
    let candidates = (64 * 30) as f64;
    let config = |final_rate: Option<f64>| {
        let mut config = micro_config()
            .with_batch_size(64)
            .with_max_steps(4)
            .with_warmup_steps(1)
            .with_mlm_probability(0.4)
            .with_mlm_probability_final(final_rate)
            .with_mlm_probability_schedule(ScheduleShape::Linear);
        *config.model.vocab_size_mut() = vocab;
        config
    };
    for (final_rate, rates) in [(Some(0.1), [0.4, 0.325, 0.25, 0.175]), (None, [0.4; 4])] {
        let mut trainer = Trainer::new(&config(final_rate), &tokenizer, &device).unwrap();
        for (k, rate) in rates.into_iter().enumerate() {
            let batch = sequences.iter().map(Vec::as_slice).collect();
            let out = trainer.step(vec![(k as u64, batch)]).unwrap();
            let selected = out.n_masked as f64 / candidates;
            let sigma = (rate * (1.0 - rate) / candidates).sqrt();
            assert!(
                (selected - rate).abs() < 4.0 * sigma,
                "final {final_rate:?}, step {}: selected {selected}, scheduled {rate}",
                k + 1
            );
        }
    }
}

/// The schedules' flags, through the binary: `--help` names them with their defaults; given,
/// they are the run's `config.json`; a value out of range or a schedule that does not exist
/// is refused naming it, and no run is left behind.
#[test]
fn the_flags_set_the_schedules_and_bad_values_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_mlm-train"))
        .args(["train", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for expected in [
        "--lr-schedule <LR_SCHEDULE>",
        "warmup_stable_decay",
        "--lr-decay-fraction <SHARE>",
        "[default: 0.1]",
        "[default: one_minus_sqrt]",
        "--mlm-probability-final <RATE>",
        "--mlm-probability-schedule <MLM_PROBABILITY_SCHEDULE>",
    ] {
        assert!(help.contains(expected), "{expected}: {help}");
    }

    let config = micro_config().with_max_steps(4).with_warmup_steps(1);
    let run = tmp.path().join("run");
    let flags = [
        "--lr-schedule",
        "warmup_stable_decay",
        "--lr-decay-fraction",
        "0.5",
        "--lr-decay-shape",
        "cosine",
        "--mlm-probability",
        "0.3",
        "--mlm-probability-final",
        "0.15",
        "--mlm-probability-schedule",
        "cosine",
    ];
    run_to_end(train_command(&config, &run, &flags));
    let saved = RunDir(run).load_config().unwrap();
    assert_eq!(
        (
            saved.lr_schedule,
            saved.lr_decay_fraction,
            saved.lr_decay_shape
        ),
        (LrSchedule::WarmupStableDecay, 0.5, ScheduleShape::Cosine)
    );
    assert_eq!(
        (saved.mlm_probability_final, saved.mlm_probability_schedule),
        (Some(0.15), ScheduleShape::Cosine)
    );

    for (i, (bad, expected)) in [
        (
            ["--mlm-probability-final", "1.5"],
            "mlm_probability_final = 1.5 must be in [0, 1]",
        ),
        (
            ["--lr-decay-fraction", "-0.1"],
            "lr_decay_fraction = -0.1 must be in [0, 1]",
        ),
        (
            ["--mlm-probability-schedule", "exponential"],
            "invalid value 'exponential' for '--mlm-probability-schedule",
        ),
        (
            ["--lr-schedule", "cosine"],
            "[possible values: linear, warmup_stable_decay]",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let run = tmp.path().join(format!("bad{i}"));
        let out = train_command(&config, &run, &bad).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?}");
        assert!(stderr.contains(expected), "{bad:?}: {stderr}");
        assert!(!run.exists(), "{bad:?} left {} behind", path_arg(&run));
    }
}
