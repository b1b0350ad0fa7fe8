//! The run directory: the paths of its files, and the lock that makes one process its
//! only writer.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::PathBuf;

use crate::error::{TrainError, io, read_json};
use crate::train::TrainConfig;

/// A run directory's files.
pub struct RunDir(pub PathBuf);

impl RunDir {
    /// `config.json`.
    pub fn config(&self) -> PathBuf {
        self.0.join("config.json")
    }
    /// `tokenizer.json`.
    pub fn tokenizer(&self) -> PathBuf {
        self.0.join("tokenizer.json")
    }
    /// `.lock`: locked by the process that writes the run, holding its PID.
    pub fn lock_file(&self) -> PathBuf {
        self.0.join(".lock")
    }
    /// Loads the run's configuration. A run made before a model flag existed
    /// (`sinusoidal_positions`, `local_attention_init`) was made without it: the flag reads
    /// as `false`.
    ///
    /// # Errors
    /// [`TrainError::InvalidInput`] if the folder has no `config.json` (it is not a run);
    /// [`TrainError::Config`] naming the file and the field for a value of the wrong type;
    /// [`TrainError::Json`] / [`TrainError::Io`] naming `config.json`.
    pub fn load_config(&self) -> Result<TrainConfig, TrainError> {
        let path = self.config();
        if !path.is_file() {
            return Err(TrainError::InvalidInput(format!(
                "{} is not a run directory: it has no config.json (`mlm-train train --run DIR` \
                 makes one)",
                self.0.display()
            )));
        }
        let mut value: serde_json::Value = read_json(&path)?;
        if let Some(model) = value.get_mut("model").and_then(|m| m.as_object_mut()) {
            for flag in ["sinusoidal_positions", "local_attention_init"] {
                model.entry(flag).or_insert(false.into());
            }
        }
        crate::train::config_from_json(value, &path)
    }

    /// Makes this process the run's only writer until the returned lock is dropped (or the
    /// process dies: the operating system releases an `flock`, so no lock goes stale).
    ///
    /// # Errors
    /// [`TrainError::RunInUse`] naming the holder's PID if another process holds the lock;
    /// nothing is written then. [`TrainError::Io`] if the lock file cannot be opened.
    pub fn lock(&self) -> Result<RunLock, TrainError> {
        let path = self.lock_file();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(TrainError::RunInUse {
                    dir: self.0.clone(),
                    holder: match holder.trim() {
                        "" => "unknown".into(),
                        pid => pid.into(),
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        // Only the holder writes the PID, so a reader of a locked file finds its holder's.
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(io(&path))?;
        Ok(RunLock { _file: file })
    }
}

/// The exclusive lock on a run directory ([`RunDir::lock`]); released when dropped.
pub struct RunLock {
    _file: File,
}
