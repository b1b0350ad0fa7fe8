//! What the ranks of a data-parallel run sum in each step ([`StepSums`]), by what
//! ([`GradientSync`]), and which rank this process is ([`Rank`]).
//!
//! One step crosses the all-reduce as one buffer, summed element by element: every
//! gradient in module order, then [`StepTotals`]'s device values, then [`SharedScalars`]'s
//! host values, each in the order of its `to_array` / `LEN`.

use burn::optim::GradientsParams;
use burn::tensor::Tensor;

use super::stop::StopSignal;
use crate::error::TrainError;
use crate::model::ModelForMaskedLm;
use crate::run::report::Traffic;

/// What a rank computed in one step, or their sum over all ranks.
pub struct StepSums {
    /// The gradients of the model's parameters.
    pub grads: GradientsParams,
    /// `[loss sum (nats), correct predictions]`, kept on the device.
    pub totals: Tensor<1>,
    /// What every rank acts on, on the host.
    pub shared: SharedScalars,
}

/// Sums what every rank computed in one step ([`StepSums`]). The identity for a single
/// process; across processes, [`super::distributed`].
pub trait GradientSync {
    /// The sums over all ranks of this rank's `sums` (`grads` for the parameters of
    /// `model`); the `shared` values come back to the host, since every rank acts on them.
    ///
    /// # Errors
    /// [`TrainError::Collective`] if a rank is gone or the reduction fails.
    fn all_reduce(
        &mut self,
        model: &ModelForMaskedLm,
        sums: StepSums,
    ) -> Result<StepSums, TrainError>;

    /// What the sums cost so far.
    fn traffic(&self) -> Traffic;
}

/// This process's place in a data-parallel run (torchrun's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank {
    /// This process, `0..world_size`; rank 0 writes the run.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
}

impl Rank {
    /// A run of one process.
    pub const SINGLE: Rank = Rank {
        rank: 0,
        world_size: 1,
    };
}

/// The host values of a step that every rank acts on, summed over the ranks: which stop
/// requests arrived, and how much of the time budget rank 0's clock says is spent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SharedScalars {
    /// Ranks that had received SIGINT when the step began (a count once summed).
    pub interrupted_ranks: f64,
    /// Ranks that had received SIGTERM when the step began.
    pub terminated_ranks: f64,
    /// Elapsed time ÷ time budget by rank 0's clock; 0 on every other rank and in a run by
    /// step count, so that the sum is rank 0's.
    pub budget_progress: f64,
}

impl SharedScalars {
    /// Values on the wire.
    pub const LEN: usize = 3;

    /// This rank's values: its stop request, and its progress through the time budget.
    pub fn of_rank(request: Option<StopSignal>, budget_progress: f64) -> Self {
        Self {
            interrupted_ranks: f64::from(u8::from(request == Some(StopSignal::Interrupt))),
            terminated_ranks: f64::from(u8::from(request == Some(StopSignal::Terminate))),
            budget_progress,
        }
    }

    /// The stop request the (summed) values carry: SIGTERM if any rank got one, else
    /// SIGINT if any did.
    pub fn stop_request(&self) -> Option<StopSignal> {
        match (self.terminated_ranks, self.interrupted_ranks) {
            (t, _) if t >= 1.0 => Some(StopSignal::Terminate),
            (_, i) if i >= 1.0 => Some(StopSignal::Interrupt),
            _ => None,
        }
    }

    /// The values in wire order.
    pub fn to_array(self) -> [f64; Self::LEN] {
        [
            self.interrupted_ranks,
            self.terminated_ranks,
            self.budget_progress,
        ]
    }

    /// The values from wire order.
    pub fn from_array(
        [interrupted_ranks, terminated_ranks, budget_progress]: [f64; Self::LEN],
    ) -> Self {
        Self {
            interrupted_ranks,
            terminated_ranks,
            budget_progress,
        }
    }
}

/// A step's metrics as they come back from the device: the `[LEN]` tensor a step keeps
/// there ([`StepTotals::device`]), read on the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTotals {
    /// Σ loss over the step's masked tokens, nats.
    pub loss_sum: f64,
    /// Masked tokens predicted exactly.
    pub correct: f64,
    /// Global L2 norm of the gradient before clipping.
    pub grad_norm: f64,
}

impl StepTotals {
    /// Values per step.
    pub const LEN: usize = 3;

    /// The device tensor `[loss_sum, correct, grad_norm]` of a step, from its `[loss_sum,
    /// correct]` totals (what crosses the all-reduce) and its gradient norm.
    pub fn device(totals: Tensor<1>, grad_norm: Tensor<1>) -> Tensor<1> {
        Tensor::cat(vec![totals, grad_norm], 0)
    }

    /// One step's values as read back, in the order of [`device`](Self::device).
    ///
    /// # Panics
    /// If `values` does not hold [`LEN`](Self::LEN) values.
    pub fn from_values(values: &[f64]) -> Self {
        let [loss_sum, correct, grad_norm] = values.try_into().expect("three values a step");
        Self {
            loss_sum,
            correct,
            grad_norm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summed_stop_requests_give_sigterm_over_sigint_over_none() {
        let sum = |ranks: &[Option<StopSignal>]| {
            let summed = ranks
                .iter()
                .fold([0.0; SharedScalars::LEN], |acc, &request| {
                    let one = SharedScalars::of_rank(request, 0.0).to_array();
                    [0, 1, 2].map(|i| acc[i] + one[i])
                });
            SharedScalars::from_array(summed).stop_request()
        };
        let (int, term) = (Some(StopSignal::Interrupt), Some(StopSignal::Terminate));
        assert_eq!(sum(&[None, None]), None);
        assert_eq!(sum(&[None, int]), int);
        assert_eq!(sum(&[int, int, int]), int);
        assert_eq!(sum(&[int, term, None]), term);
        assert_eq!(sum(&[term; 1500]), term);
    }

    #[test]
    fn shared_scalars_cross_the_wire_in_their_own_order() {
        let scalars = SharedScalars::of_rank(Some(StopSignal::Terminate), 0.25);
        assert_eq!(scalars.to_array(), [0.0, 1.0, 0.25]);
        assert_eq!(SharedScalars::from_array(scalars.to_array()), scalars);
    }
}
