//! A run on disk: its folder ([`dir`], [`lock`]), checkpoints ([`checkpoint`]), what it
//! reports ([`report`]), a trained run loaded for use ([`trained`]), and Hugging Face export
//! and import ([`hf`]).

pub mod checkpoint;
pub mod dir;
pub mod hf;
pub mod lock;
pub mod report;
pub mod trained;

pub use dir::{NewRun, ResumedRun, RunDir};
pub use report::Summary;
pub use trained::TrainedRun;
