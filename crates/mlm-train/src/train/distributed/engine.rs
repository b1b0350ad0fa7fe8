//! The engine of [`ProcessGroup::join`]: the start-up check and the one `MPI_Allreduce` per
//! step, each bounded by the watchdog.

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{CommunicatorCollectives, Equivalence};

use super::ProcessGroup;
use super::watchdog::Watchdog;
use crate::error::TrainError;
use crate::model::ModelForMaskedLm;
use crate::run::report::Traffic;
use crate::train::sync::{GradientSync, SharedScalars, StepSums};

impl ProcessGroup {
    /// The gradient sum of [`Trainer::with_ranks`] for this run, once every rank has
    /// checked that all agree on `facts` (the start step, the data, the model: see
    /// [`MpiSum::check_agreement`]).
    ///
    /// # Errors
    /// [`TrainError::Collective`] if the ranks disagree. A rank that waits longer than
    /// [`timeout`](Self::timeout) for the others exits with
    /// [`TIMED_OUT`](super::TIMED_OUT).
    ///
    /// [`Trainer::with_ranks`]: crate::train::trainer::Trainer::with_ranks
    pub fn join(&self, facts: &[(String, f64)]) -> Result<Box<dyn GradientSync>, TrainError> {
        let sum = MpiSum {
            world: self.universe.world(),
            watchdog: Watchdog::start(self.timeout, self.rank),
            bytes: 0,
            seconds: 0.0,
            calls: 0,
        };
        sum.check_agreement(facts)?;
        Ok(Box::new(sum))
    }
}

/// The sum over all ranks, one `MPI_Allreduce` per step: every gradient flattened in module
/// order into one f32 vector, followed by the step's totals and shared values.
pub struct MpiSum {
    world: SimpleCommunicator,
    watchdog: Watchdog,
    bytes: usize,
    seconds: f64,
    calls: usize,
}

impl MpiSum {
    /// `values` reduced element-wise by `op` over every rank, bounded by the watchdog.
    fn reduce<T: Equivalence + Copy + Default>(
        &self,
        values: &[T],
        op: SystemOperation,
        what: &str,
    ) -> Vec<T> {
        let mut reduced = vec![T::default(); values.len()];
        self.watchdog.guard(what.into(), || {
            self.world.all_reduce_into(values, &mut reduced[..], op)
        });
        reduced
    }

    /// Checks that every rank starts from the same point: the same step, data and settings
    /// (`facts`: whole numbers; a hash comes as several 16-bit pieces). The smallest and
    /// the largest value of each fact over the ranks must be equal: exact for any number
    /// of ranks, where a sum could balance two differences out.
    ///
    /// # Errors
    /// [`TrainError::Collective`] naming the first fact on which the ranks disagree.
    pub fn check_agreement(&self, facts: &[(String, f64)]) -> Result<(), TrainError> {
        let mine: Vec<f64> = facts.iter().map(|(_, value)| *value).collect();
        let what = "the start-up check";
        let low = self.reduce(&mine, SystemOperation::min(), what);
        let high = self.reduce(&mine, SystemOperation::max(), what);
        for (i, (name, value)) in facts.iter().enumerate() {
            if low[i] != high[i] {
                return Err(TrainError::Collective(format!(
                    "the ranks disagree on {name} (this rank: {value}, the ranks: {} to {}): \
                     start every rank with the same corpus, settings and checkpoint",
                    low[i], high[i]
                )));
            }
        }
        Ok(())
    }
}

impl GradientSync for MpiSum {
    fn traffic(&self) -> Traffic {
        Traffic {
            bytes_per_step: self.bytes,
            seconds_per_step: self.seconds / self.calls.max(1) as f64,
        }
    }

    fn all_reduce(
        &mut self,
        model: &ModelForMaskedLm,
        sums: StepSums,
    ) -> Result<StepSums, TrainError> {
        let StepSums {
            grads,
            totals,
            shared,
        } = sums;
        let device = totals.device();
        let n_totals = totals.dims()[0];
        let mut flat = Flatten {
            grads: &grads,
            parts: Vec::new(),
        };
        model.visit(&mut flat);
        flat.parts.push(totals);
        // The one read of the step's device data: MPI sums host memory.
        let mut local: Vec<f32> = Tensor::cat(flat.parts, 0)
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 gradients");
        local.extend(shared.to_array().map(|value| value as f32));
        let started = Instant::now();
        let summed = self.reduce(&local, SystemOperation::sum(), "the gradient all-reduce");
        (self.seconds, self.calls) = (
            self.seconds + started.elapsed().as_secs_f64(),
            self.calls + 1,
        );
        self.bytes = local.len() * size_of::<f32>();
        let n_grads = summed.len() - n_totals - SharedScalars::LEN;
        let mut split = Unflatten {
            flat: upload(&summed[..n_grads], &device),
            offset: 0,
            grads: GradientsParams::new(),
        };
        model.visit(&mut split);
        Ok(StepSums {
            grads: split.grads,
            totals: upload(&summed[n_grads..n_grads + n_totals], &device),
            shared: SharedScalars::from_array(std::array::from_fn(|i| {
                f64::from(summed[n_grads + n_totals + i])
            })),
        })
    }
}

fn upload(values: &[f32], device: &Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
}

/// Every parameter's gradient (zeros where this rank has none), flattened in module order.
struct Flatten<'a> {
    grads: &'a GradientsParams,
    parts: Vec<Tensor<1>>,
}

impl ModuleVisitor for Flatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val().inner();
        let n = value.shape().num_elements();
        let grad = match self.grads.get::<D>(param.id) {
            Some(grad) => grad.reshape([n]),
            None => Tensor::zeros([n], &value.device()),
        };
        self.parts.push(grad);
    }
}

/// The inverse of [`Flatten`]: each parameter's slice of `flat`, in its shape.
struct Unflatten {
    flat: Tensor<1>,
    offset: usize,
    grads: GradientsParams,
}

impl ModuleVisitor for Unflatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let shape = param.shape();
        let n = shape.num_elements();
        let slice = self.flat.clone().slice(self.offset..self.offset + n);
        self.grads.register::<D>(param.id, slice.reshape(shape));
        self.offset += n;
    }
}
