//! The lock that makes one process a run directory's only writer.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;

use crate::error::TrainError;
use crate::files::io;

/// The exclusive lock on a run directory ([`RunDir::lock`](super::RunDir::lock)); released
/// when dropped.
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Makes this process the only writer of the run directory `dir`, through its lock file
    /// `path`, until the returned lock is dropped (or the process dies: the operating system
    /// releases an `flock`, so no lock goes stale).
    ///
    /// # Errors
    /// [`TrainError::RunInUse`] naming the holder's PID if another process holds the lock;
    /// nothing is written then. [`TrainError::Io`] if the lock file cannot be opened.
    pub fn acquire(dir: &Path, path: &Path) -> Result<Self, TrainError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io(path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(path).unwrap_or_default();
                return Err(TrainError::RunInUse {
                    dir: dir.to_path_buf(),
                    holder: match holder.trim() {
                        "" => "unknown".into(),
                        pid => pid.into(),
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(path)(e)),
        }
        // Only the holder writes the PID, so a reader of a locked file finds its holder's.
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(io(path))?;
        Ok(Self { _file: file })
    }
}
