//! The bound on every collective call: MPI has none of its own, and a call blocked in it
//! cannot be cancelled.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::TIMED_OUT;

/// Ends this process with [`TIMED_OUT`] and a message that names the call when a call
/// outlives the timeout; the launcher then ends the other ranks.
pub(super) struct Watchdog {
    /// Milliseconds since `epoch` at which the current call started, plus 1; 0 when idle.
    started: &'static AtomicU64,
    what: &'static Mutex<String>,
    epoch: Instant,
}

impl Watchdog {
    /// Starts the watching thread (one per process).
    pub(super) fn start(timeout: Duration, rank: usize) -> Self {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        static WHAT: Mutex<String> = Mutex::new(String::new());
        let epoch = Instant::now();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let since = STARTED.load(Ordering::Acquire);
                let now = epoch.elapsed().as_millis() as u64 + 1;
                if since != 0 && now - since > timeout.as_millis() as u64 {
                    let what = WHAT.lock().map(|w| w.clone()).unwrap_or_default();
                    eprintln!(
                        "error: rank {rank}: no answer from the other ranks for {} s during \
                         {what}: a rank hangs. Start the job again, with `--resume DIR` once \
                         the run has a checkpoint.",
                        timeout.as_secs()
                    );
                    std::process::exit(i32::from(TIMED_OUT));
                }
            }
        });
        Self {
            started: &STARTED,
            what: &WHAT,
            epoch,
        }
    }

    /// Runs `call`, watched, as `what`.
    pub(super) fn guard<T>(&self, what: String, call: impl FnOnce() -> T) -> T {
        if let Ok(mut slot) = self.what.lock() {
            *slot = what;
        }
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        self.started.store(now, Ordering::Release);
        let result = call();
        self.started.store(0, Ordering::Release);
        result
    }
}
