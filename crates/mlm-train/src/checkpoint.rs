//! Checkpoints: model, optimizer state and run position, written atomically.
//!
//! A checkpoint is the folder `checkpoints/step-00000100/` holding `model.mpk`,
//! `optimizer.mpk` and `state.json`. It is written as `.step-00000100.partial/` and
//! renamed when complete, so a crash mid-write leaves no folder that a resume would load.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use serde::{Deserialize, Serialize};

use crate::error::{TrainError, io, read_json, write_json};
use crate::model::{BertConfig, BertForMaskedLm};

/// How many complete checkpoints to keep (older ones are deleted).
const KEEP: usize = 2;

/// Where the run stands when a checkpoint is written.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Optimizer steps completed.
    pub step: usize,
    /// Training wall time so far, in seconds (summed over resumed sessions).
    pub elapsed_seconds: f64,
    /// Real (non-padding) tokens processed so far.
    pub tokens_seen: u64,
}

fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::new()
}

fn checkpoint_error(path: &Path, reason: impl ToString) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The folder of the checkpoint at `step`.
pub fn checkpoint_dir(run_dir: &Path, step: usize) -> PathBuf {
    run_dir.join("checkpoints").join(format!("step-{step:08}"))
}

/// Writes model, optimizer and state atomically, then deletes all but the last two checkpoints.
///
/// # Errors
/// [`TrainError::Checkpoint`] or [`TrainError::Io`] naming the file; the previous
/// checkpoints stay intact.
pub fn save<B: AutodiffBackend, O: Optimizer<BertForMaskedLm<B>, B>>(
    run_dir: &Path,
    model: &BertForMaskedLm<B>,
    optimizer: &O,
    state: &RunState,
) -> Result<PathBuf, TrainError> {
    write(run_dir, model, state, |partial| {
        Recorder::<B>::record(
            &recorder(),
            optimizer.to_record(),
            partial.join("optimizer"),
        )
        .map_err(|e| checkpoint_error(&partial.join("optimizer.mpk"), e))
    })
}

/// Writes a checkpoint of the model and state only, atomically: one that `predict`, `eval`
/// and [`load_model`] read, but that a resume rejects for its missing `optimizer.mpk`
/// (e.g. weights imported from Hugging Face).
///
/// # Errors
/// As [`save`].
pub fn save_model<B: Backend>(
    run_dir: &Path,
    model: &BertForMaskedLm<B>,
    state: &RunState,
) -> Result<PathBuf, TrainError> {
    write(run_dir, model, state, |_| Ok(()))
}

/// Writes the model, whatever `extra` writes into the partial folder, and the state, as
/// `.step-N.partial/`; renames it to `step-N/` once complete and prunes old checkpoints.
fn write<B: Backend>(
    run_dir: &Path,
    model: &BertForMaskedLm<B>,
    state: &RunState,
    extra: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<PathBuf, TrainError> {
    let root = run_dir.join("checkpoints");
    let partial = root.join(format!(".step-{:08}.partial", state.step));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io(&partial))?;
    }
    std::fs::create_dir_all(&partial).map_err(io(&partial))?;
    model
        .clone()
        .save_file(partial.join("model"), &recorder())
        .map_err(|e| checkpoint_error(&partial.join("model.mpk"), e))?;
    extra(&partial)?;
    write_json(&partial.join("state.json"), state)?;
    let done = checkpoint_dir(run_dir, state.step);
    if done.exists() {
        std::fs::remove_dir_all(&done).map_err(io(&done))?;
    }
    std::fs::rename(&partial, &done).map_err(io(&done))?;
    for old in list(run_dir)?.into_iter().rev().skip(KEEP) {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    Ok(done)
}

/// Complete checkpoint folders, oldest first.
///
/// # Errors
/// [`TrainError::Io`] if the folder cannot be listed.
pub fn list(run_dir: &Path) -> Result<Vec<PathBuf>, TrainError> {
    let root = run_dir.join("checkpoints");
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .map_err(io(&root))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The newest complete checkpoint of a run.
///
/// # Errors
/// [`TrainError::Checkpoint`] if the run has none.
pub fn latest(run_dir: &Path) -> Result<PathBuf, TrainError> {
    list(run_dir)?
        .pop()
        .ok_or_else(|| checkpoint_error(&run_dir.join("checkpoints"), "no complete checkpoint"))
}

/// Loads the model of a checkpoint folder.
///
/// # Errors
/// [`TrainError::Checkpoint`] if the file is missing, truncated or of another shape.
pub fn load_model<B: Backend>(
    dir: &Path,
    config: &BertConfig,
    device: &B::Device,
) -> Result<BertForMaskedLm<B>, TrainError> {
    let file = dir.join("model.mpk");
    let model = config
        .init::<B>(device)
        .load_file(dir.join("model"), &recorder(), device)
        .map_err(|e| checkpoint_error(&file, format!("cannot be read: {e}")))?;
    // Burn loads tensors of any shape: check them against the run's config.json.
    let expected = [config.vocab_size, config.hidden_size];
    let found = model.embeddings.word_embeddings.weight.dims();
    let positions = model.embeddings.position_embeddings.weight.dims()[0];
    if found != expected || positions != config.max_position_embeddings {
        return Err(checkpoint_error(
            &file,
            format!(
                "holds word embeddings {found:?} and {positions} positions, but config.json says \
                 [vocab_size, hidden_size] = {expected:?} and {} positions",
                config.max_position_embeddings
            ),
        ));
    }
    Ok(model)
}

/// Loads the optimizer state and run state of a checkpoint folder into `optimizer`.
///
/// # Errors
/// [`TrainError::Checkpoint`] / [`TrainError::Json`] naming the broken file.
pub fn load_training<B: AutodiffBackend, O: Optimizer<BertForMaskedLm<B>, B>>(
    dir: &Path,
    optimizer: O,
    device: &B::Device,
) -> Result<(O, RunState), TrainError> {
    let record = Recorder::<B>::load(&recorder(), dir.join("optimizer"), device)
        .map_err(|e| checkpoint_error(&dir.join("optimizer.mpk"), e))?;
    let state = read_json(&dir.join("state.json"))?;
    Ok((optimizer.load_record(record), state))
}
