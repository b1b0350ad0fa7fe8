//! Helpers shared by the trainer's integration tests: the fixture corpus, a tiny
//! configuration, and copying a run directory.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Device;
use burn::tensor::Tensor;
use mlm_train::BertConfig;
use mlm_train::TrainConfig;
use mlm_train::run::report::{MetricsRow, Summary};

/// The tests' training device: burn-flex, the reference CPU backend, with autodiff.
pub fn flex_device() -> Device {
    Device::flex().autodiff()
}

/// Moby Dick chapters 1–8.
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus")
}

/// A 1-layer BERT of hidden size 32 that trains 30 steps in seconds.
pub fn tiny_config() -> TrainConfig {
    TrainConfig::new(corpus())
        .with_model(
            BertConfig::new(0)
                .with_hidden_size(32)
                .with_num_hidden_layers(1)
                .with_num_attention_heads(2)
                .with_intermediate_size(64)
                .with_max_position_embeddings(64)
                .into(),
        )
        .with_vocab_size(1000)
        .with_max_seq_len(64)
        .with_batch_size(16)
        .with_grad_accumulation(2)
        .with_learning_rate(5e-3)
        .with_warmup_steps(5)
        .with_max_steps(30)
        .with_eval_every(10)
        .with_checkpoint_every(10)
}

/// Hidden size 16, 1 layer, sequences of 32, batches of 8: a step takes milliseconds.
pub fn micro_config() -> TrainConfig {
    tiny_config()
        .with_model(
            BertConfig::new(0)
                .with_hidden_size(16)
                .with_num_hidden_layers(1)
                .with_num_attention_heads(2)
                .with_intermediate_size(32)
                .with_max_position_embeddings(32)
                .into(),
        )
        .with_vocab_size(300)
        .with_max_seq_len(32)
        .with_batch_size(8)
        .with_grad_accumulation(1)
        .with_max_steps(20)
}

/// Every float parameter's values, in module order.
pub fn parameters(model: &impl Module) -> Vec<f32> {
    struct Values(Vec<f32>);
    impl ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values: Vec<f32> = param.val().into_data().try_to_vec::<f32>().unwrap();
            self.0.extend(values);
        }
    }
    let mut values = Values(Vec::new());
    model.visit(&mut values);
    values.0
}

/// A path as a command-line argument.
pub fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The steps of the training rows.
pub fn steps(rows: &[MetricsRow]) -> Vec<usize> {
    train_losses(rows)
        .into_iter()
        .map(|(step, _)| step)
        .collect()
}

/// `(step, loss)` of the training rows.
pub fn train_losses(rows: &[MetricsRow]) -> Vec<(usize, f64)> {
    rows.iter()
        .filter(|r| r.split == "train")
        .map(|r| (r.step, r.loss))
        .collect()
}

/// Copies a folder recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// `mlm-train train --config FILE --corpus CORPUS --run RUN [extra]` of this build's binary,
/// with `config` written to FILE next to RUN.
pub fn train_command<S: AsRef<OsStr>>(config: &TrainConfig, run: &Path, extra: &[S]) -> Command {
    let file = run.with_extension("config.json");
    std::fs::write(&file, serde_json::to_string(config).unwrap()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_mlm-train"));
    command
        .args(["train", "--config", path_arg(&file), "--corpus"])
        .arg(&config.corpus)
        .args(["--run", path_arg(run)])
        .args(extra);
    command
}

/// `mlm-train train --resume RUN [extra]` of this build's binary.
pub fn resume_command(run: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mlm-train"));
    command
        .args(["train", "--resume", path_arg(run)])
        .args(extra);
    command
}

/// Runs `command` to its end and asserts that it succeeded (its status and stderr if not).
pub fn run_to_end(mut command: Command) -> Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The run's `summary.json`.
pub fn summary(run: &Path) -> Summary {
    serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
}
