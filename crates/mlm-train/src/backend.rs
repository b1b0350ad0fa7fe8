//! The backends this build can train on, chosen at run time by `--backend`.

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// A compiled-in backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// burn-ndarray on the CPU (cargo feature `ndarray`, on by default): the reference the
    /// others are compared with.
    Ndarray,
    /// burn-flex on the CPU (cargo feature `flex`, on by default; the default `--backend`):
    /// the gemm crate's matmul, with AVX-512 kernels where the CPU has them. It trains the
    /// tiny BERT 1.4× faster than ndarray on 2 cores (README, Performance).
    Flex,
    /// burn-wgpu on the default GPU adapter (cargo feature `wgpu`); on a machine without
    /// a GPU that is Mesa's lavapipe, a CPU implementation of Vulkan.
    Wgpu,
}

impl BackendKind {
    /// The name used in summaries and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ndarray => "ndarray",
            Self::Flex => "flex",
            Self::Wgpu => "wgpu",
        }
    }

    /// The backends compiled into this build, in `--backend` order.
    pub fn compiled() -> Vec<Self> {
        Self::value_variants()
            .iter()
            .copied()
            .filter(|kind| match kind {
                Self::Ndarray => cfg!(feature = "ndarray"),
                Self::Flex => cfg!(feature = "flex"),
                Self::Wgpu => cfg!(feature = "wgpu"),
            })
            .collect()
    }
}

/// The device a backend runs on: what tables and summaries print, so that a CPU figure is
/// never mistaken for a GPU one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Adapter {
    /// The device's name as its driver reports it (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// `Cpu`, `IntegratedGpu`, `DiscreteGpu`, `VirtualGpu` or `Other` (wgpu's device types).
    pub device_type: String,
}

impl std::fmt::Display for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.device_type)
    }
}

/// The device `kind` runs on. For wgpu this is the adapter `wgpu_device` selected, or a
/// placeholder if no wgpu device was made in this process.
pub fn adapter(kind: BackendKind) -> Adapter {
    let cpu = |crate_name: &str| Adapter {
        name: format!(
            "CPU, {} threads ({crate_name})",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        device_type: "Cpu".into(),
    };
    match kind {
        BackendKind::Ndarray => cpu("burn-ndarray"),
        BackendKind::Flex => cpu("burn-flex"),
        BackendKind::Wgpu => wgpu::ADAPTER.get().cloned().unwrap_or_else(|| Adapter {
            name: "default wgpu adapter".into(),
            device_type: "unknown".into(),
        }),
    }
}

/// [`adapter`] of the backend named `backend`, in words.
pub fn adapter_name(backend: &str) -> String {
    let kind = BackendKind::from_str(backend, true).unwrap_or(BackendKind::Flex);
    adapter(kind).to_string()
}

/// Bytes the backend's device allocator holds (wgpu only: the CPU backends use the host heap).
pub fn device_reserved_bytes(kind: BackendKind) -> Option<u64> {
    match kind {
        BackendKind::Ndarray | BackendKind::Flex => None,
        BackendKind::Wgpu => wgpu::reserved_bytes(),
    }
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use std::sync::OnceLock;

    use burn::backend::wgpu::graphics::AutoGraphicsApi;
    use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, WgpuRuntime, init_setup};
    use burn::cubecl::Runtime;

    use super::Adapter;

    /// The adapter of the default device, recorded when the device is first set up.
    pub(super) static ADAPTER: OnceLock<Adapter> = OnceLock::new();

    /// The default wgpu device, set up on first use exactly as burn-wgpu would do lazily
    /// (automatic graphics API, default runtime options), recording its adapter.
    pub fn wgpu_device() -> WgpuDevice {
        let device = WgpuDevice::default();
        ADAPTER.get_or_init(|| {
            let info = init_setup::<AutoGraphicsApi>(&device, RuntimeOptions::default())
                .adapter
                .get_info();
            Adapter {
                name: info.name,
                device_type: format!("{:?}", info.device_type),
            }
        });
        device
    }

    pub(super) fn reserved_bytes() -> Option<u64> {
        ADAPTER.get()?;
        let usage = WgpuRuntime::client(&WgpuDevice::default())
            .memory_usage()
            .ok()?;
        Some(usage.bytes_reserved)
    }
}

#[cfg(feature = "wgpu")]
pub use wgpu::wgpu_device;

#[cfg(not(feature = "wgpu"))]
mod wgpu {
    pub(super) static ADAPTER: std::sync::OnceLock<super::Adapter> = std::sync::OnceLock::new();
    pub(super) fn reserved_bytes() -> Option<u64> {
        None
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
            #[cfg(feature = "flex")]
            $crate::backend::BackendKind::Flex => {
                type $B = burn::backend::Autodiff<burn::backend::Flex>;
                let $device = Default::default();
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::backend::BackendKind::Wgpu => {
                type $B = burn::backend::Autodiff<burn::backend::Wgpu>;
                let $device = $crate::backend::wgpu_device();
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
