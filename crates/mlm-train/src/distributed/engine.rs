//! The engine of [`ProcessGroup::join`]: registering with burn-collective, the one
//! all-reduce per step, and the watchdog that bounds every call.

use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use burn::collective::{self, CollectiveConfig, PeerId, ReduceOperation};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Device, ElementConversion, Tensor, TensorData, TensorPrimitive};
use burn_communication::Address;

use super::{ProcessGroup, TIMED_OUT};
use crate::error::TrainError;
use crate::model::BertForMaskedLm;
use crate::report::Traffic;
use crate::trainer::{GradientSync, StepSums};

impl ProcessGroup {
    /// Joins a run of `world_size` processes: rank 0 starts the coordinator, every rank
    /// registers and waits for the others, then all check that they agree on `facts` (the
    /// start step, the data, the model: see [`CollectiveSum::check_agreement`]). Returns the
    /// gradient sum of [`Trainer::with_ranks`].
    ///
    /// # Errors
    /// [`TrainError::Config`] (see [`validate`](Self::validate)); [`TrainError::Collective`]
    /// if registering fails or the ranks disagree. A rank that waits longer than `timeout`
    /// for the others exits with [`TIMED_OUT`], naming the coordinator.
    ///
    /// [`Trainer::with_ranks`]: crate::trainer::Trainer::with_ranks
    pub fn join<B: AutodiffBackend>(
        &self,
        world_size: usize,
        facts: &[(&str, f64)],
        device: &B::Device,
    ) -> Result<Box<dyn GradientSync<B>>, TrainError> {
        self.validate(world_size)?;
        quiet_logging();
        quiet_transport_panics(self.rank);
        let port = self.coordinator_port().expect("validated");
        if self.rank == 0 {
            start_coordinator(port)?;
        }
        let data_port = self
            .data_service_port
            .unwrap_or(port.wrapping_add(1 + self.rank as u16));
        let node = format!("ws://{}:{data_port}", self.reachable_host());
        let address = |url: &str| {
            Address::from_str(url)
                .map_err(|_| TrainError::Config(format!("`{url}` is not a usable address")))
        };
        let config = CollectiveConfig::default()
            .with_num_devices(1)
            .with_num_nodes(world_size as u32)
            .with_global_address(address(&format!("ws://{}", self.coordinator))?)
            .with_node_address(address(&node)?)
            .with_data_service_port(data_port);
        let peer = PeerId::from(self.rank as u32);
        let inner = Tensor::<B, 1>::zeros([1], device).inner().device();
        let watchdog = Watchdog::start(self.timeout, self.rank);
        watchdog
            .guard(
                format!(
                    "joining the coordinator at {} (is its address reachable from every rank?)",
                    self.coordinator
                ),
                || collective::register::<B::InnerBackend>(peer, inner.clone(), config),
            )
            .map_err(|e| collective_error("registering", e))?;
        let mut sum = CollectiveSum {
            peer,
            watchdog,
            bytes: 0,
            seconds: 0.0,
            calls: 0,
            last_sum: None,
            _backend: PhantomData::<B>,
        };
        sum.check_agreement(facts, world_size, &inner)?;
        // The start-up check is no step: the traffic figures count steps only.
        (sum.seconds, sum.calls) = (0.0, 0);
        Ok(Box::new(sum))
    }
}

/// The sum over all ranks, one all-reduce per step: every gradient flattened in module
/// order into one vector, followed by the step's totals.
pub struct CollectiveSum<B: AutodiffBackend> {
    peer: PeerId,
    watchdog: Watchdog,
    bytes: usize,
    seconds: f64,
    calls: usize,
    /// The squared norm of the last step's sum, to recognise a stale one.
    last_sum: Option<f64>,
    _backend: PhantomData<B>,
}

impl<B: AutodiffBackend> CollectiveSum<B> {
    /// Fails loudly on a sum that cannot be this step's: the previous step's again (a stale
    /// tensor), or this rank's own share alone (the others' missing or replaced). Squared
    /// norms of the gradients and totals stand for the vectors; the totals hold the
    /// step's loss sum, so two real steps never share one.
    ///
    /// # Errors
    /// [`TrainError::Collective`] naming which.
    fn check_fresh(&mut self, local: f64, sum: f64) -> Result<(), TrainError> {
        let problem = if self.last_sum == Some(sum) {
            Some("the same sum as the previous step (a stale tensor)")
        } else if sum == local {
            Some("this rank's own gradients back (the other ranks' are missing)")
        } else {
            None
        };
        self.last_sum = Some(sum);
        match problem {
            Some(problem) => Err(TrainError::Collective(format!(
                "the gradient all-reduce returned {problem}"
            ))),
            None => Ok(()),
        }
    }

    /// Sums `values` over all ranks (one all-reduce), bounded by the watchdog.
    ///
    /// # Errors
    /// [`TrainError::Collective`] if a rank is gone.
    pub fn sum(
        &mut self,
        values: Tensor<B::InnerBackend, 1>,
        what: &str,
    ) -> Result<Tensor<B::InnerBackend, 1>, TrainError> {
        let started = Instant::now();
        self.bytes = values.shape().num_elements() * size_of::<f32>();
        let primitive = values.into_primitive().tensor();
        let summed = self
            .watchdog
            .guard(what.into(), || {
                collective::all_reduce::<B::InnerBackend>(
                    self.peer,
                    primitive,
                    ReduceOperation::Sum,
                )
            })
            .map_err(|e| collective_error(what, e))?;
        self.seconds += started.elapsed().as_secs_f64();
        self.calls += 1;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(summed)))
    }

    /// Checks that every rank starts from the same point: the same step, data and settings
    /// (`facts`: small whole numbers, exact in f32, each summed over the ranks and compared
    /// with `world_size ×` its value; a hash comes as several 16-bit pieces).
    ///
    /// # Errors
    /// [`TrainError::Collective`] naming the first fact on which the ranks disagree.
    pub fn check_agreement(
        &mut self,
        facts: &[(&str, f64)],
        world_size: usize,
        device: &Device<B::InnerBackend>,
    ) -> Result<(), TrainError> {
        let values: Vec<f32> = facts.iter().map(|(_, v)| *v as f32).collect();
        let local = Tensor::from_data(TensorData::new(values.clone(), [values.len()]), device);
        let summed = self.sum(local, "the start-up check")?.into_data();
        let summed = summed.to_vec::<f32>().expect("f32 values");
        for ((name, _), (mine, sum)) in facts.iter().zip(values.iter().zip(summed)) {
            if sum != mine * world_size as f32 {
                return Err(TrainError::Collective(format!(
                    "the ranks disagree on {name} (this rank: {mine}, the mean over the ranks: \
                     {}): start every rank with the same corpus, settings and checkpoint",
                    sum / world_size as f32
                )));
            }
        }
        Ok(())
    }
}

impl<B: AutodiffBackend> GradientSync<B> for CollectiveSum<B> {
    fn traffic(&self) -> Traffic {
        Traffic {
            bytes_per_step: self.bytes,
            seconds_per_step: self.seconds / self.calls.max(1) as f64,
        }
    }

    fn all_reduce(
        &mut self,
        model: &BertForMaskedLm<B>,
        sums: StepSums<B>,
    ) -> Result<StepSums<B>, TrainError> {
        let StepSums {
            grads,
            totals,
            shared,
        } = sums;
        let mut flat = Flatten::<B> {
            grads: &grads,
            parts: Vec::new(),
        };
        model.visit(&mut flat);
        let n_totals = totals.dims()[0];
        let shared_values = shared.map(|value| value as f32).to_vec();
        let shared_values =
            Tensor::from_data(TensorData::new(shared_values, [2]), &totals.device());
        flat.parts.extend([totals, shared_values]);
        let local = Tensor::cat(flat.parts, 0);
        let local_norm = squared_norm(&local);
        let summed = self.sum(local, "the gradient all-reduce")?;
        self.check_fresh(local_norm, squared_norm(&summed))?;
        let mut split = Unflatten::<B> {
            flat: summed,
            offset: 0,
            grads: GradientsParams::new(),
        };
        model.visit(&mut split);
        let (start, end) = (split.offset, split.offset + n_totals);
        let totals = split.flat.clone().slice(start..end);
        // Every rank acts on the summed stop requests and clock: read them back.
        let shared = split.flat.slice(end..end + 2).into_data();
        let shared = shared.to_vec::<f32>().expect("f32 totals");
        Ok(StepSums {
            grads: split.grads,
            totals,
            shared: [0, 1].map(|i| f64::from(shared[i])),
        })
    }
}

/// `Σ x²` of `values`, read to the host.
fn squared_norm<B: burn::tensor::backend::Backend>(values: &Tensor<B, 1>) -> f64 {
    f64::from(
        values
            .clone()
            .powi_scalar(2)
            .sum()
            .into_scalar()
            .elem::<f32>(),
    )
}

/// Every parameter's gradient (zeros where this rank has none), flattened in module order.
struct Flatten<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    parts: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Flatten<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val().inner();
        let n = value.shape().num_elements();
        let grad = match self.grads.get::<B::InnerBackend, D>(param.id) {
            Some(grad) => grad.reshape([n]),
            None => Tensor::zeros([n], &value.device()),
        };
        self.parts.push(grad);
    }
}

/// The inverse of [`Flatten`]: each parameter's slice of `flat`, in its shape.
struct Unflatten<B: AutodiffBackend> {
    flat: Tensor<B::InnerBackend, 1>,
    offset: usize,
    grads: GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unflatten<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let shape = param.shape();
        let n = shape.num_elements();
        let slice = self.flat.clone().slice(self.offset..self.offset + n);
        self.grads
            .register::<B::InnerBackend, D>(param.id, slice.reshape(shape));
        self.offset += n;
    }
}

/// Bounds the collective calls of this process: a call that outlives the timeout ends the
/// process with [`TIMED_OUT`] and a message that names the call. burn-collective has no
/// timeout of its own, and a call blocked in it cannot be cancelled.
struct Watchdog {
    /// Milliseconds since `epoch` at which the current call started, plus 1; 0 when idle.
    started: &'static AtomicU64,
    what: &'static Mutex<String>,
    epoch: Instant,
}

impl Watchdog {
    fn start(timeout: Duration, rank: usize) -> Self {
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
                        "error: rank {rank}: no answer from the other ranks for {} s while {what}: \
                         a rank died, hangs or never started. Start every rank again, with \
                         `--resume DIR` once the run has a checkpoint.",
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

    fn guard<T>(&self, what: String, call: impl FnOnce() -> T) -> T {
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

/// Panics on the collective's transport threads (tokio workers: a peer's socket closing, at
/// a rank's death or at the end of a run) as one line instead of a backtrace; the call that
/// waits on them reports the failure itself. Other panics keep the default report.
fn quiet_transport_panics(rank: usize) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let transport = std::thread::current()
            .name()
            .is_some_and(|name| name.starts_with("tokio-"));
        if !transport {
            return default(info);
        }
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        eprintln!("rank {rank}: the collective's transport stopped: {message}");
    }));
}

/// Runs the coordinator (burn-collective's global orchestrator) on its own thread. It
/// installs tokio's SIGINT / SIGTERM handlers and returns on the first signal; ours still
/// receive the signal too ([`crate::stop`]), and the run stops after its step.
fn start_coordinator(port: u16) -> Result<(), TrainError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TrainError::Collective(format!("cannot start the coordinator: {e}")))?;
    std::thread::spawn(move || runtime.block_on(burn_collective::start_global_orchestrator(port)));
    Ok(())
}

/// Warnings and errors of the collective's transport on stderr; its per-transfer INFO lines
/// (it would install a subscriber at INFO on stdout) nowhere.
fn quiet_logging() {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(tracing_subscriber::filter::LevelFilter::WARN);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

fn collective_error(what: &str, e: collective::CollectiveError) -> TrainError {
    let why = match e {
        collective::CollectiveError::LocalServerMissing => {
            "another rank is gone (it died, or closed its connection)".to_string()
        }
        other => format!("{other:?}"),
    };
    TrainError::Collective(format!(
        "{what} failed: {why}. Start every rank again, with `--resume DIR` once the run has a \
         checkpoint"
    ))
}
