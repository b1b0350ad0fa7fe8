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
        match try_lock_briefly(&file) {
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

/// `file.try_lock()`, tried again for up to 100 ms while it would block. A child process
/// forked by another thread of this process holds a copy of the descriptor, and so the lock,
/// until its `exec` closes it: a lock just released here can read as held for that moment.
/// A holder that is really running keeps it longer, and is refused.
fn try_lock_briefly(file: &File) -> Result<(), TryLockError> {
    for _ in 0..10 {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            done => return done,
        }
    }
    file.try_lock()
}
