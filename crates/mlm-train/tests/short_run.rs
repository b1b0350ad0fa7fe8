//! A short real run on Moby Dick chapters 1–8 (`tests/fixtures/corpus`): the loss falls,
//! every output file exists and parses, and `resume` from the step-20 checkpoint continues
//! at step 21 with the same losses as the uninterrupted run.

mod common;
use common::{
    copy_dir, flex_device, micro_config, run_to_end, tiny_config, train_command, train_losses,
};
use mlm_train::data::SubwordTokenizer;
use mlm_train::run::TrainedRun;
use mlm_train::run::checkpoint;
use mlm_train::run::report::{Summary, read_metrics};
use mlm_train::{BertConfig, ModelConfig, TrainError};
use mlm_train::{RunDir, resume, train};

#[test]
fn short_run_learns_writes_every_file_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let device = flex_device();
    let summary = train(tiny_config(), &run, &device, "flex").unwrap();

    // Every output file exists and parses.
    let dir = RunDir(run.clone());
    let config = dir.load_config().unwrap();
    assert_eq!(
        config.model.vocab_size(),
        1000,
        "vocab size taken from the tokenizer"
    );
    assert_eq!(
        SubwordTokenizer::from_file(&dir.tokenizer())
            .unwrap()
            .vocab_size(),
        1000
    );
    let rows = read_metrics(&run.join("metrics.csv")).unwrap();
    let losses = train_losses(&rows);
    assert_eq!(
        losses.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<_>>()
    );
    let valid_steps: Vec<usize> = rows
        .iter()
        .filter(|r| r.split == "valid")
        .map(|r| r.step)
        .collect();
    assert_eq!(valid_steps, [10, 20, 30]);
    let png = std::fs::read(run.join("loss_curve.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let saved: Summary =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(saved, summary);
    assert_eq!(summary.steps, 30);
    assert!(summary.unigram_entropy > 4.0 && summary.final_valid_loss.is_finite());
    let checkpoints = checkpoint::list(&run).unwrap();
    assert_eq!(
        checkpoints,
        [
            checkpoint::checkpoint_dir(&run, 20),
            checkpoint::checkpoint_dir(&run, 30)
        ]
    );

    assert_loss_falls(&losses);

    // Resume from step 20 (as if the run had died after that checkpoint): it continues at
    // step 21 with the uninterrupted run's losses, and the metrics continue from step 20.
    let interrupted = tmp.path().join("interrupted");
    copy_dir(&run, &interrupted);
    std::fs::remove_dir_all(checkpoint::checkpoint_dir(&interrupted, 30)).unwrap();
    let resumed = resume(&interrupted, None, &device, "flex").unwrap();
    let resumed_losses = train_losses(&read_metrics(&interrupted.join("metrics.csv")).unwrap());
    assert_eq!(
        resumed_losses.len(),
        30,
        "rows 1–20 kept, 21–30 written once"
    );
    for ((step, a), (_, b)) in losses.iter().zip(&resumed_losses).skip(20) {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs(),
            "step {step}: {a} uninterrupted vs {b} resumed"
        );
    }
    assert!((resumed.final_valid_loss - summary.final_valid_loss).abs() < 1e-4);

    // The result is usable: fill-mask and evaluation load the newest checkpoint.
    let trained = TrainedRun::load(&run, &flex_device()).unwrap();
    let predictions = trained
        .fill_mask("Call me [MASK]. It is a way I have.", 3, &flex_device())
        .unwrap();
    assert_eq!(predictions.len(), 1);
    assert_eq!(predictions[0].position, 3);
    let total: f64 = predictions[0].candidates.iter().map(|c| c.1).sum();
    assert!(total > 0.0 && total <= 1.0 + 1e-6);
    let eval = trained.evaluate(None, &flex_device()).unwrap();
    assert!((eval.loss - summary.final_valid_loss).abs() < 1e-4);

    // Resuming a finished run to a step it has passed is refused, and config.json is kept.
    let before = std::fs::read_to_string(dir.config()).unwrap();
    assert!(matches!(
        resume(&run, Some(25), &device, "flex").unwrap_err(),
        TrainError::Config(_)
    ));
    assert_eq!(std::fs::read_to_string(dir.config()).unwrap(), before);

    // A second `train` into the same directory is refused rather than overwriting it.
    assert!(matches!(
        train(tiny_config(), &run, &device, "flex"),
        Err(TrainError::Config(_))
    ));
}

/// The loss falls over 30 steps: the last five average well below the first five.
fn assert_loss_falls(losses: &[(usize, f64)]) {
    let mean = |r: &[(usize, f64)]| r.iter().map(|x| x.1).sum::<f64>() / r.len() as f64;
    let (first, last) = (mean(&losses[..5]), mean(&losses[25..]));
    assert!(last < first - 0.5, "loss {first:.3} → {last:.3}");
}

#[test]
fn a_modernbert_from_scratch_learns_and_resumes_bit_for_bit() {
    // The tiny run's sizes as a ModernBERT, 3 layers (one global, two over ±8 tokens of the
    // 64): the loss falls, and a resume from step 20 repeats steps 21–30 bit for bit.
    let tmp = tempfile::tempdir().unwrap();
    let (run, device) = (tmp.path().join("run"), flex_device());
    let mut config = tiny_config();
    config.model = config.model.to_modernbert();
    let ModelConfig::ModernBert(modernbert) = &mut config.model else {
        unreachable!()
    };
    modernbert.num_hidden_layers = 3;
    modernbert.local_attention = 16;
    let summary = train(config, &run, &device, "flex").unwrap();
    let saved = RunDir(run.clone()).load_config().unwrap();
    assert_eq!(saved.model.family().model_type(), "modernbert");
    let losses = train_losses(&read_metrics(&run.join("metrics.csv")).unwrap());
    assert_loss_falls(&losses);

    let interrupted = tmp.path().join("interrupted");
    copy_dir(&run, &interrupted);
    std::fs::remove_dir_all(checkpoint::checkpoint_dir(&interrupted, 30)).unwrap();
    let resumed = resume(&interrupted, None, &device, "flex").unwrap();
    let resumed_losses = train_losses(&read_metrics(&interrupted.join("metrics.csv")).unwrap());
    assert_eq!(resumed_losses, losses);
    assert_eq!(resumed.final_valid_loss, summary.final_valid_loss);
}

#[test]
fn train_architecture_modernbert_builds_one_of_the_main_jobs_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let config = micro_config().with_max_steps(2).with_warmup_steps(1);
    let flags = [
        "--architecture",
        "modernbert",
        "--layers",
        "3",
        "--dropout",
        "0.1",
    ];
    run_to_end(train_command(&config, &run, &flags));
    let saved = RunDir(run).load_config().unwrap();
    let ModelConfig::ModernBert(model) = saved.model else {
        panic!("{:?}", saved.model)
    };
    assert_eq!((model.hidden_size, model.num_hidden_layers), (16, 3));
    // Half the 32-token sequence: local layers stay local.
    assert_eq!(
        (model.local_attention, model.global_attn_every_n_layers),
        (16, 3)
    );
    assert_eq!((model.attention_dropout, model.mlp_dropout), (0.1, 0.1));
}

#[test]
fn bad_settings_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let device = flex_device();
    let cases = [
        tiny_config().with_batch_size(0),
        tiny_config().with_grad_accumulation(0),
        tiny_config().with_max_steps(0),
        tiny_config().with_learning_rate(f64::NAN),
        tiny_config().with_learning_rate(-1.0),
        tiny_config().with_vocab_size(3),
        tiny_config().with_max_seq_len(2),
        tiny_config().with_model(BertConfig::new(0).with_hidden_dropout_prob(1.5).into()),
    ];
    for (i, config) in cases.into_iter().enumerate() {
        let run = tmp.path().join(format!("run{i}"));
        let err = train(config, &run, &device, "flex").unwrap_err();
        assert!(matches!(err, TrainError::Config(_)), "case {i}: {err}");
        assert!(!run.exists(), "case {i} left {} behind", run.display());
    }
    let mut missing = tiny_config();
    missing.corpus = tmp.path().join("nowhere");
    assert!(matches!(
        train(missing, &tmp.path().join("r"), &device, "flex").unwrap_err(),
        TrainError::CorpusNotFound(_)
    ));
}
