//! Data parallelism across processes on MPI (the `mpi` feature: rsmpi over the system's
//! Open MPI): every rank computes the gradients of its share of the global batch, and one
//! `MPI_Allreduce` (sum) per step adds them up, so that every rank applies the same update
//! to the same weights.
//!
//! The launcher (`mpirun -np N`, or Slurm's `srun`) starts the processes; each learns its
//! `rank` and the `world_size` from MPI (torchrun's words). Rank 0 alone writes the run.
//!
//! Two facts shape this module (docs/SCALE_OUT.md):
//! - parameter ids are drawn at random in each process, so gradients are matched by their
//!   place in the module, never by id: they are flattened in module order, and the whole
//!   step (every gradient, the loss sum, the correct count, the stop requests and rank 0's
//!   clock) is **one** all-reduce;
//! - MPI has no timeout. A rank that dies is the launcher's business (`mpirun` ends the job
//!   when one of its processes exits abnormally), but one that is alive and silent would
//!   block the others forever: a watchdog bounds every call ([`ProcessGroup::timeout`]).

#[cfg(feature = "mpi")]
mod engine;
#[cfg(feature = "mpi")]
mod watchdog;

use std::time::Duration;

#[cfg(feature = "mpi")]
pub use engine::MpiSum;

use crate::error::{ConfigError, TrainError};
use crate::train::sync::Rank;

/// Exit status of a rank whose collective call outlived [`ProcessGroup::timeout`]: the
/// convention of `timeout(1)`.
pub const TIMED_OUT: u8 = 124;

/// This process's part in a data-parallel run that an MPI launcher started.
pub struct ProcessGroup {
    /// This process, `0..world_size` (MPI's rank in `MPI_COMM_WORLD`); rank 0 writes the run.
    pub rank: usize,
    /// Processes of the run (`MPI_COMM_WORLD`'s size), at least 2.
    pub world_size: usize,
    /// How long a rank waits in one collective call (the start-up check, or a step's
    /// all-reduce) before it gives up with [`TIMED_OUT`]: the bound on the wait for a rank
    /// that hangs.
    pub timeout: Duration,
    #[cfg(feature = "mpi")]
    universe: mpi::environment::Universe,
}

/// Whether a process that a launcher announced as one of `announced` processes joins an MPI
/// world: `false` for none or a world of 1.
///
/// # Errors
/// [`ConfigError`] for a world of 2 or more in a build without MPI (`mpi_built`
/// false), naming the feature to build with.
pub fn joins_world(announced: Option<usize>, mpi_built: bool) -> Result<bool, TrainError> {
    match announced {
        Some(size) if size >= 2 && !mpi_built => Err(ConfigError::NotBuilt {
            what: format!("started by an MPI launcher as one of {size} processes"),
            feature: "mpi",
        }
        .into()),
        Some(size) => Ok(size >= 2),
        None => Ok(false),
    }
}

impl ProcessGroup {
    /// Joins the run that the launcher started, if this process was started by one for a
    /// run of 2 or more processes; `None` for a process of its own (or a world of 1).
    ///
    /// # Errors
    /// [`ConfigError`] for a zero `timeout`, and, in a build without the `mpi`
    /// feature, for a launcher's world of 2 or more ([`joins_world`]).
    pub fn from_launcher(timeout: Duration) -> Result<Option<Self>, TrainError> {
        let announced = crate::launcher::world_size(|name| std::env::var(name).ok());
        if !joins_world(announced, cfg!(feature = "mpi"))? {
            return Ok(None);
        }
        if timeout.is_zero() {
            return Err(ConfigError::value(
                "--collective-timeout",
                timeout.as_secs_f64(),
                "must be at least 1 s",
            )
            .into());
        }
        Self::init(timeout)
    }

    #[cfg(not(feature = "mpi"))]
    fn init(_timeout: Duration) -> Result<Option<Self>, TrainError> {
        unreachable!("joins_world refuses a launcher's world without the `mpi` feature")
    }

    #[cfg(feature = "mpi")]
    fn init(timeout: Duration) -> Result<Option<Self>, TrainError> {
        use mpi::traits::Communicator;
        // Only the main thread calls MPI; the shard threads and the watchdog never do.
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| TrainError::Collective("MPI was initialised twice".into()))?;
        let world = universe.world();
        let (rank, world_size) = (world.rank() as usize, world.size() as usize);
        Ok((world_size > 1).then_some(Self {
            rank,
            world_size,
            timeout,
            universe,
        }))
    }

    /// Without the `mpi` feature no group exists ([`from_launcher`](Self::from_launcher)
    /// refuses a launcher's world), so there is nothing to join.
    ///
    /// # Errors
    /// Always [`ConfigError`].
    #[cfg(not(feature = "mpi"))]
    pub fn join(
        &self,
        _facts: &[(String, f64)],
    ) -> Result<Box<dyn crate::train::sync::GradientSync>, TrainError> {
        Err(ConfigError::NotBuilt {
            what: "a data-parallel run".into(),
            feature: "mpi",
        }
        .into())
    }

    /// Waits until every rank is here (`MPI_Barrier`): rank 0 has prepared the run's data
    /// folder before the others map it. Without the `mpi` feature there is one process.
    pub fn barrier(&self) {
        #[cfg(feature = "mpi")]
        {
            use mpi::traits::CommunicatorCollectives;
            self.universe.world().barrier();
        }
    }

    /// This process's place in the run.
    pub fn rank(&self) -> Rank {
        Rank {
            rank: self.rank,
            world_size: self.world_size,
        }
    }

    /// Ends this process's part in the run. After a run that ended alike on every rank
    /// (`ok`: its end, a stop by signal included), it waits for every rank (so that no
    /// rank's exit ends the job while rank 0 still writes the run) and finalises MPI. After
    /// an error, which the other ranks may not share, it aborts the job: `MPI_Abort` ends
    /// every rank, and the launcher reports it after this rank's error line. Without the
    /// `mpi` feature there is one process and nothing to do.
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables))]
    pub fn finish(self, ok: bool, exit_status: u8) {
        #[cfg(feature = "mpi")]
        {
            use mpi::traits::{Communicator, CommunicatorCollectives};
            let world = self.universe.world();
            if !ok {
                world.abort(i32::from(exit_status));
            }
            world.barrier();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launchers_world_is_joined_only_by_a_build_with_mpi() {
        for mpi_built in [false, true] {
            assert!(!joins_world(None, mpi_built).unwrap());
            assert!(!joins_world(Some(1), mpi_built).unwrap());
        }
        assert!(joins_world(Some(2), true).unwrap());
        match joins_world(Some(2), false) {
            Err(TrainError::Config(e @ ConfigError::NotBuilt { .. })) => {
                let message = e.to_string();
                // The rebuild keeps this build's features and adds `mpi` last.
                let features = message.rsplit("--features ").next().unwrap();
                assert!(
                    message.contains("one of 2 processes") && features.ends_with("mpi`"),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
