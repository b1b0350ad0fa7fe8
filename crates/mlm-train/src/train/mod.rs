//! Training: the [`trainer`]'s optimizer step ([`step`], [`optimizer`], [`lr`]), the sums
//! over ranks ([`sync`], [`distributed`]), and the [`session`] that drives it over a run with
//! validation, checkpoints and reports; a step's memory ([`memory`]), stop requests
//! ([`stop`]) and the progress bar ([`progress`]).
//!
//! A loop of our own rather than burn-train's `Learner`: the `Learner` averages accumulated
//! gradients per micro-batch (a mean of means, not Σ sums ÷ Σ counts), clips per parameter
//! rather than by global norm, and cannot resume a run mid-epoch at the same data order and
//! masks. Each of those is a line here.

pub mod distributed;
mod fused_adamw;
pub mod lr;
pub mod memory;
pub mod optimizer;
pub mod plan;
pub mod progress;
pub mod session;
pub mod step;
pub mod stop;
pub mod sync;
pub mod trainer;

pub use session::{RunContext, resume, resume_with, train, train_with};
pub use trainer::Trainer;
