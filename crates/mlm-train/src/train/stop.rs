//! Ctrl-C and SIGTERM: the first asks the run to stop after the current step, with a
//! checkpoint, the summary and the plot written; a second aborts at once.
//!
//! A watcher thread receives the signals (signal-hook's iterator: the handler itself only
//! wakes the thread, so printing and exiting happen outside signal context). The training
//! loop reads the request between steps. An abort exits with [`ABORTED`]: a checkpoint
//! being written is then left as a `.partial` folder, which no resume loads and the next
//! resume deletes, so the newest complete checkpoint stays the one to resume from.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::error::TrainError;

/// Exit status of a process aborted by a second signal while stopping.
pub const ABORTED: i32 = 3;

/// A signal that asks a run to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM (`kill`, a job scheduler).
    Terminate,
}

impl StopSignal {
    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }

    /// The signal named `name` (`SIGINT`, `SIGTERM`), as a summary records it.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Interrupt, Self::Terminate]
            .into_iter()
            .find(|signal| signal.name() == name)
    }

    /// The exit status of a run that stopped cleanly on this signal: 128 + the signal's
    /// number (130, 143), as a shell reports a process the signal ended.
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }
}

/// The number of the first stop signal received, 0 for none.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs the handlers for SIGINT and SIGTERM and their watcher thread (once per
/// process; later calls do nothing). Until this is called, [`requested`] is always `None`:
/// a library user's own handlers are left alone.
///
/// # Errors
/// [`TrainError::InvalidInput`] if the operating system refuses a handler.
pub fn install_handlers() -> Result<(), TrainError> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| TrainError::InvalidInput(format!("cannot install a signal handler: {e}")))?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let first =
                RECEIVED.compare_exchange(0, signal as usize, Ordering::SeqCst, Ordering::SeqCst);
            match first {
                Ok(_) => eprintln!(
                    "{}: stopping at the end of the current step, with a checkpoint once \
                     training has begun (a second signal aborts at once)",
                    name(signal)
                ),
                Err(_) => {
                    eprintln!(
                        "{}: aborting; the newest complete checkpoint is kept",
                        name(signal)
                    );
                    std::process::exit(ABORTED);
                }
            }
        }
    });
    let _ = INSTALLED.set(());
    Ok(())
}

fn name(signal: i32) -> &'static str {
    match signal {
        SIGTERM => StopSignal::Terminate.name(),
        _ => StopSignal::Interrupt.name(),
    }
}

/// The signal that asked the run to stop, if one did since [`install_handlers`].
pub fn requested() -> Option<StopSignal> {
    match RECEIVED.load(Ordering::SeqCst) as i32 {
        0 => None,
        SIGTERM => Some(StopSignal::Terminate),
        _ => Some(StopSignal::Interrupt),
    }
}
