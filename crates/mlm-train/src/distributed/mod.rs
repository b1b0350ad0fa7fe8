//! Data parallelism across processes on Burn's own collective (`burn-collective` 0.21):
//! every rank computes the gradients of its share of the global batch, and one all-reduce
//! per step sums them, so that every rank applies the same update to the same weights.
//!
//! The words are torchrun's: `world_size` processes, each with a `rank`; rank 0 runs the
//! coordinator (burn-collective's global orchestrator, which only pairs the ranks up) and
//! writes the run. Tensors travel peer to peer between the ranks' data services.
//!
//! Three facts of burn-collective 0.21 shape this module (README, "Scale out"):
//! - its end-of-operation barrier never resets, so every global all-reduce after the first
//!   hangs: the workspace patches that one file (`patches/burn-collective-0.21.0`);
//! - `GradientsParams::all_reduce` makes one call per parameter *in `ParamId` order*, and
//!   parameter ids are drawn at random per process, so ranks would add up different
//!   parameters. We flatten the gradients in module order instead and make **one** call per
//!   step, which also sidesteps the transfer-id reuse of tracel-ai/burn #4549;
//! - nothing in it times out: a rank that is alive but silent, or never connects, blocks
//!   the others forever. A watchdog bounds every call ([`ProcessGroup::timeout`]).

#[cfg(feature = "collective")]
mod engine;

use std::net::{ToSocketAddrs, UdpSocket};
use std::time::Duration;

#[cfg(feature = "collective")]
pub use engine::CollectiveSum;

use crate::error::TrainError;
use crate::trainer::Rank;

/// Exit status of a rank whose collective call outlived [`ProcessGroup::timeout`]: the
/// convention of `timeout(1)`.
pub const TIMED_OUT: u8 = 124;

/// How this process joins a data-parallel run; the number of processes is the run's
/// [`TrainConfig::world_size`](crate::config::TrainConfig::world_size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessGroup {
    /// This process, `0..world_size`; rank 0 runs the coordinator and writes the run.
    pub rank: usize,
    /// `HOST:PORT` where rank 0 runs the coordinator and every other rank reaches it.
    pub coordinator: String,
    /// The port of this rank's data service (tensor transfers); by default the
    /// coordinator's port + 1 + rank, distinct for every rank of one machine.
    pub data_service_port: Option<u16>,
    /// How long a rank waits in one collective call (joining, or a step's all-reduce)
    /// before it gives up with [`TIMED_OUT`]: the bound on the wait for a rank that died
    /// silently, hangs, or never started.
    pub timeout: Duration,
}

impl ProcessGroup {
    /// This process's place in a run of `world_size` processes.
    pub fn rank(&self, world_size: usize) -> Rank {
        Rank {
            rank: self.rank,
            world_size,
        }
    }

    /// Checks the settings before anything is prepared.
    ///
    /// # Errors
    /// [`TrainError::Config`] for a world size below 2, a rank outside `0..world_size`, a
    /// coordinator that is not `HOST:PORT`, or a zero timeout.
    pub fn validate(&self, world_size: usize) -> Result<(), TrainError> {
        let bad = |message: String| Err(TrainError::Config(message));
        if world_size < 2 || self.rank >= world_size {
            return bad(format!(
                "rank {} of world size {world_size}: a data-parallel run needs world size >= 2 \
                 and a rank in 0..world size",
                self.rank
            ));
        }
        if self.coordinator_port().is_none() {
            return bad(format!(
                "coordinator `{}` is not HOST:PORT (e.g. 127.0.0.1:29500)",
                self.coordinator
            ));
        }
        if self.timeout.is_zero() {
            return bad("the collective timeout must be at least 1 s".into());
        }
        Ok(())
    }

    /// Without the `collective` feature there is nothing to join.
    ///
    /// # Errors
    /// Always [`TrainError::Config`].
    #[cfg(not(feature = "collective"))]
    pub fn join<B: burn::tensor::backend::AutodiffBackend>(
        &self,
        _world_size: usize,
        _facts: &[(&str, f64)],
        _device: &B::Device,
    ) -> Result<Box<dyn crate::trainer::GradientSync<B>>, TrainError> {
        Err(TrainError::Config(
            "this mlm-train was built without the `collective` feature: no --world-size".into(),
        ))
    }

    fn coordinator_port(&self) -> Option<u16> {
        let (host, port) = self.coordinator.rsplit_once(':')?;
        port.parse().ok().filter(|_| !host.is_empty())
    }

    /// The address at which the other ranks reach this one: loopback when the coordinator
    /// is on this machine, else the local address of the route to the coordinator.
    fn reachable_host(&self) -> String {
        let route = || -> Option<String> {
            let target = self.coordinator.to_socket_addrs().ok()?.next()?;
            if target.ip().is_loopback() {
                return Some(target.ip().to_string());
            }
            let socket = UdpSocket::bind(("0.0.0.0", 0)).ok()?;
            socket.connect(target).ok()?;
            Some(socket.local_addr().ok()?.ip().to_string())
        };
        route().unwrap_or_else(|| "127.0.0.1".into())
    }
}
