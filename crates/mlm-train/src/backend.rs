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
    /// tiny BERT 2.3× faster than ndarray on 2 cores, with the fused loss and GELU kernels of
    /// mlm-core (README, Performance).
    Flex,
    /// burn-wgpu on the default GPU adapter (cargo feature `wgpu`); on a machine without
    /// a GPU that is Mesa's lavapipe, a CPU implementation of Vulkan.
    Wgpu,
    /// burn-cuda on the first NVIDIA GPU (cargo feature `cuda`): CubeCL's CUDA runtime. The
    /// feature builds without a GPU or the CUDA toolkit; without a device, `--backend cuda`
    /// is an error at run time.
    Cuda,
}

impl BackendKind {
    /// The name used in summaries and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ndarray => "ndarray",
            Self::Flex => "flex",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
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
                Self::Cuda => cfg!(feature = "cuda"),
            })
            .collect()
    }
}

impl BackendKind {
    /// The compiled backends that can run here: cuda only where a CUDA device is present
    /// (the others always can; wgpu falls back to a CPU adapter).
    pub fn available() -> Vec<Self> {
        Self::compiled()
            .into_iter()
            .filter(|kind| *kind != Self::Cuda || cuda_present())
            .collect()
    }
}

#[cfg(feature = "cuda")]
fn cuda_present() -> bool {
    cuda::cuda_device().is_ok()
}

#[cfg(not(feature = "cuda"))]
fn cuda_present() -> bool {
    false
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
        BackendKind::Cuda => cuda::ADAPTER.get().cloned().unwrap_or_else(|| Adapter {
            name: "first CUDA device".into(),
            device_type: "unknown".into(),
        }),
    }
}

/// [`adapter`] of the backend named `backend`, in words.
pub fn adapter_name(backend: &str) -> String {
    let kind = BackendKind::from_str(backend, true).unwrap_or(BackendKind::Flex);
    adapter(kind).to_string()
}

/// Bytes the backend's device allocator holds (GPU backends only: the CPU backends use the
/// host heap).
pub fn device_reserved_bytes(kind: BackendKind) -> Option<u64> {
    match kind {
        BackendKind::Ndarray | BackendKind::Flex => None,
        BackendKind::Wgpu => wgpu::reserved_bytes(),
        BackendKind::Cuda => cuda::reserved_bytes(),
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

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::OnceLock;

    use burn::backend::cuda::CudaDevice;
    use burn::cubecl::Runtime;
    use burn::cubecl::cuda::CudaRuntime;
    use cudarc::driver::result;

    use super::Adapter;
    use crate::error::TrainError;

    /// The adapter of the first device, recorded when [`cuda_device`] first finds it.
    pub(super) static ADAPTER: OnceLock<Adapter> = OnceLock::new();

    /// The first CUDA device, once the driver confirms that it exists (and its name is
    /// recorded). burn-cuda would panic at the first operation instead.
    ///
    /// # Errors
    /// [`TrainError::Config`] if this machine has no CUDA driver (`libcuda.so`) or no device.
    pub fn cuda_device() -> Result<CudaDevice, TrainError> {
        let none = |why: String| TrainError::Config(format!("--backend cuda: {why}"));
        // SAFETY: only loads the driver library, if present, and looks it up.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(none("no CUDA driver (libcuda.so) on this machine".into()));
        }
        let first = result::init()
            .and_then(|()| result::device::get_count())
            .map_err(|e| none(format!("the CUDA driver reports {e:?}")))?;
        if first < 1 {
            return Err(none("the CUDA driver sees no device".into()));
        }
        let name = result::device::get(0)
            .and_then(result::device::get_name)
            .unwrap_or_else(|_| "CUDA device 0".into());
        ADAPTER.get_or_init(|| Adapter {
            name,
            device_type: "Gpu (CUDA)".into(),
        });
        Ok(CudaDevice::default())
    }

    pub(super) fn reserved_bytes() -> Option<u64> {
        ADAPTER.get()?;
        let usage = CudaRuntime::client(&CudaDevice::default())
            .memory_usage()
            .ok()?;
        Some(usage.bytes_reserved)
    }
}

#[cfg(feature = "cuda")]
pub use cuda::cuda_device;

#[cfg(not(feature = "cuda"))]
mod cuda {
    pub(super) static ADAPTER: std::sync::OnceLock<super::Adapter> = std::sync::OnceLock::new();
    pub(super) fn reserved_bytes() -> Option<u64> {
        None
    }
}

/// Runs `$body` with `$B` bound to the autodiff backend of `$kind` and `$device` to its
/// default device; a backend not compiled in, or a CUDA backend without a device, is an
/// error.
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
            #[cfg(feature = "cuda")]
            $crate::backend::BackendKind::Cuda => {
                type $B = burn::backend::Autodiff<burn::backend::Cuda>;
                match $crate::backend::cuda_device() {
                    Ok($device) => $body,
                    Err(e) => Err(e),
                }
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
