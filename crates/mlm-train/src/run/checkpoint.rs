//! Checkpoints: model, optimizer state and run position, written atomically.
//!
//! A checkpoint is the folder `checkpoints/step-00000100/` holding `model.bpk`,
//! `optimizer.bpk` (Burn 0.22's burnpack records of the weights and of AdamW's state, keyed
//! by parameter id) and `state.json`. It is written as `.step-00000100.partial/` and
//! renamed when complete, so a crash mid-write leaves no folder that a resume would load;
//! [`remove_partial`] deletes such leftovers when a run resumes.

use std::path::{Path, PathBuf};

use burn::optim::ModuleOptimizer;
use burn::store::ModuleRecord;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::files::{io, read_json, write_json};
use crate::model::{ModelConfig, ModelForMaskedLm};

/// How many complete checkpoints to keep (older ones are deleted).
const KEEP: usize = 2;

/// Where the run stands when a checkpoint is written.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Optimizer steps completed.
    pub step: usize,
    /// Training wall time so far, in seconds (summed over resumed sessions): what a run by
    /// the clock has spent of its time budget. A state without it reads as 0.
    #[serde(default)]
    pub elapsed_seconds: f64,
    /// Real (non-padding) tokens processed so far.
    pub tokens_seen: u64,
}

/// The weights' file in a checkpoint folder.
const MODEL_FILE: &str = "model.bpk";
/// The optimizer state's file in a checkpoint folder.
const OPTIMIZER_FILE: &str = "optimizer.bpk";
/// The weights' file of a checkpoint written by mlm-train 0.1 (Burn 0.21's MessagePack
/// record), which Burn 0.22 cannot read.
const MODEL_FILE_0_1: &str = "model.mpk";

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
/// checkpoints stay intact and the incomplete one is removed.
pub fn save(
    run_dir: &Path,
    model: &ModelForMaskedLm,
    optimizer: &ModuleOptimizer,
    state: &RunState,
) -> Result<PathBuf, TrainError> {
    write(run_dir, model, state, |partial| {
        let file = partial.join(OPTIMIZER_FILE);
        optimizer
            .save(&file)
            .map_err(|e| checkpoint_error(&file, e))
    })
}

/// Writes a checkpoint of the model and state only, atomically: one that `predict`, `eval`
/// and [`load_model`] read, but that a resume rejects for its missing `optimizer.bpk`
/// (e.g. weights imported from Hugging Face).
///
/// # Errors
/// As [`save`].
pub fn save_model(
    run_dir: &Path,
    model: &ModelForMaskedLm,
    state: &RunState,
) -> Result<PathBuf, TrainError> {
    write(run_dir, model, state, |_| Ok(()))
}

/// Writes the model, whatever `extra` writes into the partial folder, and the state, as
/// `.step-N.partial/`; renames it to `step-N/` once complete and prunes old checkpoints.
/// A failed write removes its partial folder.
fn write(
    run_dir: &Path,
    model: &ModelForMaskedLm,
    state: &RunState,
    extra: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<PathBuf, TrainError> {
    let root = run_dir.join("checkpoints");
    let partial = root.join(format!(".step-{:08}.partial", state.step));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io(&partial))?;
    }
    if let Err(error) = write_partial(&partial, model, state, extra) {
        // Best effort: a leftover is harmless (never loaded) and removed on resume.
        let _ = std::fs::remove_dir_all(&partial);
        return Err(error);
    }
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

/// Writes the files of a checkpoint into the folder `partial`.
fn write_partial(
    partial: &Path,
    model: &ModelForMaskedLm,
    state: &RunState,
    extra: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(partial).map_err(io(partial))?;
    let file = partial.join(MODEL_FILE);
    model
        .save_weights(&file)
        .map_err(|e| checkpoint_error(&file, e))?;
    extra(partial)?;
    write_json(&partial.join("state.json"), state)
}

/// Deletes the `.step-*.partial` folders that a crash during [`save`] leaves behind;
/// returns them.
///
/// # Errors
/// [`TrainError::Io`] if the folder cannot be listed or a leftover removed.
pub fn remove_partial(run_dir: &Path) -> Result<Vec<PathBuf>, TrainError> {
    let root = run_dir.join("checkpoints");
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(&root).map_err(io(&root))? {
        let path = entry.map_err(io(&root))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(".step-") && name.ends_with(".partial") {
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
            removed.push(path);
        }
    }
    Ok(removed)
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
/// [`TrainError::Checkpoint`] if the file is missing or truncated, if its parameters or
/// their shapes differ from what `config` builds (a run resumed with another
/// configuration), or if the checkpoint was written by mlm-train 0.1, whose Burn 0.21
/// records this version cannot read (the message says how to carry the weights across).
pub fn load_model(
    dir: &Path,
    config: &ModelConfig,
    device: &Device,
) -> Result<ModelForMaskedLm, TrainError> {
    check_format(dir)?;
    let file = dir.join(MODEL_FILE);
    let record = ModuleRecord::load(&file).map_err(|e| {
        checkpoint_error(
            &file,
            format!(
                "cannot be read: the file is missing, truncated or corrupt (an older \
                 checkpoint in {} may be intact). Burn says: {e}",
                dir.parent().unwrap_or(dir).display()
            ),
        )
    })?;
    config.init(device).with_record(record).map_err(|e| {
        checkpoint_error(
            &file,
            format!("does not fit the model config.json builds: {e}"),
        )
    })
}

/// Refuses a checkpoint folder written by mlm-train 0.1 (Burn 0.21's `.mpk` records, which
/// Burn 0.22 cannot read), saying how to carry its weights across.
///
/// # Errors
/// [`TrainError::Checkpoint`] naming the 0.1 file.
pub fn check_format(dir: &Path) -> Result<(), TrainError> {
    if dir.join(MODEL_FILE).is_file() || !dir.join(MODEL_FILE_0_1).is_file() {
        return Ok(());
    }
    Err(checkpoint_error(
        &dir.join(MODEL_FILE_0_1),
        "was written by mlm-train 0.1 (Burn 0.21), whose records Burn 0.22 cannot read. \
         Carry the weights across with 0.1's `mlm-train export-hf --run RUN HF_DIR`, then \
         `mlm-train import-hf HF_DIR --out NEW_RUN` here for predict, eval and export-hf, or \
         `mlm-train train --init-from HF_DIR` to train on from those weights (the optimizer \
         state does not cross: training continues with a fresh one)",
    ))
}

/// Whether the checkpoint folder `dir` holds optimizer state, which a resume needs
/// ([`save_model`]'s checkpoints do not).
pub fn has_optimizer_state(dir: &Path) -> bool {
    dir.join(OPTIMIZER_FILE).is_file()
}

/// Loads the optimizer state and run state of a checkpoint folder into `optimizer`.
///
/// Burn puts the loaded moments on its default device and moves them to each parameter's
/// device at the next step (values unchanged, bit for bit).
///
/// # Errors
/// [`TrainError::Checkpoint`] / [`TrainError::Json`] naming the broken file; a checkpoint
/// of mlm-train 0.1 as in [`load_model`].
pub fn load_training(
    dir: &Path,
    optimizer: ModuleOptimizer,
) -> Result<(ModuleOptimizer, RunState), TrainError> {
    check_format(dir)?;
    let file = dir.join(OPTIMIZER_FILE);
    let optimizer = optimizer
        .load(&file)
        .map_err(|e| checkpoint_error(&file, e))?;
    let state = read_json(&dir.join("state.json"))?;
    Ok((optimizer, state))
}
