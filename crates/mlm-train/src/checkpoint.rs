//! Checkpoints: model, optimizer state and run position, written atomically.
//!
//! A checkpoint is the folder `checkpoints/step-00000100/` holding `model.mpk`,
//! `optimizer.mpk` and `state.json`. It is written as `.step-00000100.partial/` and
//! renamed when complete, so a crash mid-write leaves no folder that a resume would load;
//! [`remove_partial`] deletes such leftovers when a run resumes.

use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::Tensor;
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
    /// Training wall time so far, in seconds (summed over resumed sessions): what a run by
    /// the clock has spent of its time budget. A state without it reads as 0.
    #[serde(default)]
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
/// checkpoints stay intact and the incomplete one is removed.
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
/// A failed write removes its partial folder.
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
fn write_partial<B: Backend>(
    partial: &Path,
    model: &BertForMaskedLm<B>,
    state: &RunState,
    extra: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(partial).map_err(io(partial))?;
    model
        .clone()
        .save_file(partial.join("model"), &recorder())
        .map_err(|e| checkpoint_error(&partial.join("model.mpk"), e))?;
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
/// [`TrainError::Checkpoint`] if the file is missing or truncated, or if its layers or
/// any parameter's shape differ from what `config` builds (a run resumed with another
/// configuration).
pub fn load_model<B: Backend>(
    dir: &Path,
    config: &BertConfig,
    device: &B::Device,
) -> Result<BertForMaskedLm<B>, TrainError> {
    let file = dir.join("model.mpk");
    let record: <BertForMaskedLm<B> as Module<B>>::Record =
        Recorder::<B>::load(&recorder(), dir.join("model"), device).map_err(|e| {
            // Burn's message for a truncated file talks of record-format versions.
            checkpoint_error(
                &file,
                format!(
                    "cannot be read: the file is truncated or corrupt (an older checkpoint \
                         in {} may be intact). Burn says: {e}",
                    dir.parent().unwrap_or(dir).display()
                ),
            )
        })?;
    // Burn panics on a layer count that differs and loads tensors of any shape: check
    // both against the run's config.json before and after loading.
    if record.layers.len() != config.num_hidden_layers {
        return Err(checkpoint_error(
            &file,
            format!(
                "holds {} layers, but config.json says num_hidden_layers = {}",
                record.layers.len(),
                config.num_hidden_layers
            ),
        ));
    }
    let fresh = config.init::<B>(device);
    let expected = parameter_shapes(&fresh);
    let model = fresh.load_record(record);
    let found = parameter_shapes(&model);
    if let Some(((name, want), (_, got))) = expected.iter().zip(&found).find(|(e, f)| e != f) {
        return Err(checkpoint_error(
            &file,
            format!("holds {name} of shape {got:?}, but config.json builds {want:?}"),
        ));
    }
    Ok(model)
}

/// Every float parameter of `model` as `(path, shape)`, e.g. `("embeddings.word_embeddings.weight", [1000, 32])`.
fn parameter_shapes<B: Backend, M: Module<B>>(model: &M) -> Vec<(String, Vec<usize>)> {
    struct Shapes {
        path: Vec<String>,
        found: Vec<(String, Vec<usize>)>,
    }
    impl<B: Backend> ModuleVisitor<B> for Shapes {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.found
                .push((self.path.join("."), param.val().dims().to_vec()));
        }
    }
    let mut shapes = Shapes {
        path: Vec::new(),
        found: Vec::new(),
    };
    model.visit(&mut shapes);
    shapes.found
}

/// Whether the checkpoint folder `dir` holds optimizer state, which a resume needs
/// ([`save_model`]'s checkpoints do not).
pub fn has_optimizer_state(dir: &Path) -> bool {
    dir.join("optimizer.mpk").is_file()
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
