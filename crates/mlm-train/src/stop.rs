//! Ctrl-C and SIGTERM: the first asks the run to stop after the current step, with a
//! checkpoint, the summary and the plot written; a second aborts at once.
//!
//! The handlers only set flags (async-signal-safe); the training loop reads them between
//! steps. An abort exits with [`ABORTED`] from the signal handler itself: a checkpoint
//! being written is then left as a `.partial` folder, which no resume loads and the next
//! resume deletes, so the newest complete checkpoint stays the one to resume from.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

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

    /// The exit status of a run that stopped cleanly on this signal: 128 + the signal's
    /// number (130, 143), as a shell reports a process the signal ended.
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }
}

struct Flags {
    /// Set by the first signal; a signal that finds it set aborts.
    pending: Arc<AtomicBool>,
    /// The number of the last signal received, 0 for none.
    signal: Arc<AtomicUsize>,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

/// Installs the handlers for SIGINT and SIGTERM (once per process; later calls do nothing).
/// Until this is called, [`requested`] is always `None`: a library user's own handlers
/// are left alone.
///
/// # Errors
/// [`TrainError::InvalidInput`] if the operating system refuses a handler.
pub fn install_handlers() -> Result<(), TrainError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::flag;
    if FLAGS.get().is_some() {
        return Ok(());
    }
    let flags = Flags {
        pending: Arc::new(AtomicBool::new(false)),
        signal: Arc::new(AtomicUsize::new(0)),
    };
    let refused = |e: std::io::Error| {
        TrainError::InvalidInput(format!("cannot install a signal handler: {e}"))
    };
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as the previous signal left it.
        flag::register_conditional_shutdown(signal, ABORTED, Arc::clone(&flags.pending))
            .map_err(refused)?;
        flag::register(signal, Arc::clone(&flags.pending)).map_err(refused)?;
        flag::register_usize(signal, Arc::clone(&flags.signal), signal as usize)
            .map_err(refused)?;
    }
    let _ = FLAGS.set(flags);
    Ok(())
}

/// The signal that asked the run to stop, if one did since [`install_handlers`].
pub fn requested() -> Option<StopSignal> {
    use signal_hook::consts::SIGTERM;
    let flags = FLAGS.get()?;
    if !flags.pending.load(Ordering::SeqCst) {
        return None;
    }
    match flags.signal.load(Ordering::SeqCst) as i32 {
        SIGTERM => Some(StopSignal::Terminate),
        _ => Some(StopSignal::Interrupt),
    }
}
