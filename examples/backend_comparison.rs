//! The backend comparison from Rust code: the same tiny BERT, batch and seed on every
//! backend compiled into `mlm-train`, as a Markdown table (what `mlm-train bench backends`
//! prints).
//!
//! Run: `cargo run --release --example backend_comparison`. The root package builds
//! `mlm-train` with every backend; on a machine without a GPU, wgpu runs on lavapipe,
//! a CPU, and the table's adapter column says so.

use mlm_train::TrainError;
use mlm_train::backend::BackendKind;
use mlm_train::bench::{BackendBenchConfig, compare_backends, markdown_table};

fn main() -> Result<(), TrainError> {
    let config = BackendBenchConfig::new().with_timed_steps(5);
    let rows = compare_backends(&config, &BackendKind::available())?;
    println!("{}", markdown_table(&config, &rows));
    Ok(())
}
