//! The backends this build can train on, chosen at run time by `--backend`.

use clap::ValueEnum;

/// A compiled-in backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// burn-ndarray on the CPU (cargo feature `ndarray`, the default).
    Ndarray,
    /// burn-wgpu on the default GPU adapter (cargo feature `wgpu`); on a machine without
    /// a GPU that is Mesa's lavapipe, a CPU implementation of Vulkan.
    Wgpu,
}

impl BackendKind {
    /// The name used in summaries and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ndarray => "ndarray",
            Self::Wgpu => "wgpu",
        }
    }
}

/// The device a backend runs on, in words, for summaries.
pub fn adapter_name(backend: &str) -> String {
    match backend {
        "ndarray" => format!(
            "CPU, {} threads (burn-ndarray)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        _ => "default wgpu adapter (on a machine without a GPU: lavapipe, a CPU)".to_string(),
    }
}

/// Runs `$body` with `$B` bound to the autodiff backend of `$kind` and `$device` to its
/// default device; a backend not compiled in is an error.
#[macro_export]
macro_rules! with_backend {
    ($kind:expr, |$B:ident, $device:ident| $body:expr) => {
        match $kind {
            #[cfg(feature = "ndarray")]
            $crate::backend::BackendKind::Ndarray => {
                type $B = burn::backend::Autodiff<burn::backend::NdArray>;
                let $device = Default::default();
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::backend::BackendKind::Wgpu => {
                type $B = burn::backend::Autodiff<burn::backend::Wgpu>;
                let $device = Default::default();
                $body
            }
            #[allow(unreachable_patterns)]
            other => Err($crate::TrainError::Config(format!(
                "backend {} is not compiled in: rebuild with `--features {}`",
                other.name(),
                other.name()
            ))),
        }
    };
}
