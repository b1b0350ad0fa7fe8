//! The backends this build can train on, chosen at run time by `--backend`.

use burn::tensor::Device;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, TrainError};

/// A compiled-in backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// burn-ndarray on the CPU (cargo feature `ndarray`, off by default: Burn 0.22 deprecates
    /// it): plain tensor ops, the reference `bench backends` compares the others with.
    Ndarray,
    /// burn-flex on the CPU (cargo feature `flex`, on by default; the default `--backend`):
    /// the gemm crate's matmul, with AVX-512 kernels where the CPU has them. It trains the
    /// tiny BERT 2.3× faster than ndarray on 2 cores, with mlm-core's fused kernels (loss,
    /// GELU, LayerNorm, attention; docs/PERFORMANCE.md).
    Flex,
    /// burn-wgpu on the default GPU adapter (cargo feature `wgpu`); on a machine without
    /// a GPU that is Mesa's lavapipe, a CPU implementation of Vulkan.
    Wgpu,
    /// burn-cuda on an NVIDIA GPU (cargo feature `cuda`): CubeCL's CUDA runtime, on the
    /// first GPU, or under an MPI launcher on the GPU at the process's local rank
    /// ([`cuda_ordinal`]). The feature builds without a GPU or the CUDA toolkit; without a
    /// device, `--backend cuda` is an error at run time.
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

fn cuda_present() -> bool {
    #[cfg(feature = "cuda")]
    return cuda::check_driver().is_ok();
    #[cfg(not(feature = "cuda"))]
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

/// The device `kind` runs on. For a GPU backend this is the device [`BackendKind::device`]
/// opened, or a placeholder if none was opened in this process.
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
        BackendKind::Wgpu | BackendKind::Cuda => recorded(kind).unwrap_or_else(|| unnamed(kind)),
    }
}

/// What the `kind` device opened in this process said it is; `None` if none was opened.
fn recorded(kind: BackendKind) -> Option<Adapter> {
    let opened = OPENED.lock().expect("the adapter table");
    opened
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, adapter)| adapter.clone())
}

/// The stand-in for a device that has not said what it is.
fn unnamed(kind: BackendKind) -> Adapter {
    Adapter {
        name: format!("default {} device", kind.name()),
        device_type: "unknown".into(),
    }
}

/// The GPU devices opened in this process, with what they said they are.
static OPENED: std::sync::Mutex<Vec<(BackendKind, Adapter)>> = std::sync::Mutex::new(Vec::new());

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
        // Only a device this process opened: asking must not open one.
        BackendKind::Wgpu | BackendKind::Cuda => {
            recorded(kind)?;
            let device = kind.plain_device().ok()?;
            device.memory_pool_usage().map(|usage| usage.bytes_reserved)
        }
    }
}

impl BackendKind {
    /// The default device of this backend with autodiff, as training needs it: burn
    /// dispatches every tensor op to the backend the device names (Burn 0.22).
    ///
    /// # Errors
    /// [`ConfigError`] if the backend is not compiled in, or for cuda if this machine
    /// has no CUDA driver or device (burn-cuda would panic at the first operation instead).
    pub fn device(self) -> Result<Device, TrainError> {
        Ok(self.plain_device()?.autodiff())
    }

    /// [`BackendKind::device`] without autodiff: for inference and evaluation.
    ///
    /// # Errors
    /// As [`BackendKind::device`].
    pub fn plain_device(self) -> Result<Device, TrainError> {
        match self {
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            Self::Ndarray => Ok(Device::ndarray()),
            #[cfg(feature = "flex")]
            Self::Flex => Ok(Device::flex()),
            #[cfg(feature = "wgpu")]
            Self::Wgpu => Ok(opened(self, Device::wgpu(Default::default()))),
            #[cfg(feature = "cuda")]
            Self::Cuda => {
                let devices = cuda::check_driver()?;
                let local_rank = crate::launcher::local_rank(|name| std::env::var(name).ok());
                Ok(opened(
                    self,
                    Device::cuda(cuda_ordinal(local_rank, devices)?),
                ))
            }
            #[allow(unreachable_patterns)]
            other => Err(ConfigError::NotBuilt {
                what: format!("--backend {}", other.name()),
                feature: other.name(),
            }
            .into()),
        }
    }
}

/// The CUDA device (ordinal) of a process with this local rank on a machine with `devices`
/// GPUs: one GPU per process, as torchrun's `LOCAL_RANK` convention has it; the first GPU
/// outside a launcher.
///
/// # Errors
/// [`ConfigError`] if the local rank has no GPU of its own (more processes on this machine
/// than GPUs): two processes on one GPU would run, but slower than one, and silently.
pub fn cuda_ordinal(local_rank: Option<usize>, devices: usize) -> Result<usize, ConfigError> {
    let local_rank = local_rank.unwrap_or(0);
    ConfigError::check(
        "--backend",
        "cuda",
        local_rank < devices,
        format!(
            "needs a GPU per process on each machine: local rank {local_rank} finds {devices} \
             CUDA device(s) here; start at most {devices} process(es) per machine"
        ),
    )?;
    Ok(local_rank)
}

/// `device`, after recording what it says it is (once per backend).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn opened(kind: BackendKind, device: Device) -> Device {
    let mut opened = OPENED.lock().expect("the adapter table");
    if !opened.iter().any(|(k, _)| *k == kind) {
        let adapter = match device.identity() {
            Some(id) => Adapter {
                device_type: if id.physical.is_some() { "Gpu" } else { "Cpu" }.into(),
                name: id.name,
            },
            None => unnamed(kind),
        };
        opened.push((kind, adapter));
    }
    device
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::error::{ConfigError, TrainError};

    /// How many CUDA devices the driver here sees (at least 1).
    ///
    /// # Errors
    /// [`ConfigError`] if this machine has no CUDA driver (`libcuda.so`) or no device.
    pub(super) fn check_driver() -> Result<usize, TrainError> {
        let none = |why: String| TrainError::Config(ConfigError::value("--backend", "cuda", why));
        // SAFETY: only loads the driver library, if present, and looks it up.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(none(
                "finds no CUDA driver (libcuda.so) on this machine".into(),
            ));
        }
        let count = cudarc::driver::result::init()
            .and_then(|()| cudarc::driver::result::device::get_count())
            .map_err(|e| none(format!("finds a CUDA driver that reports {e:?}")))?;
        if count < 1 {
            return Err(none("finds a CUDA driver that sees no device".into()));
        }
        Ok(count as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_process_on_a_machine_gets_a_gpu_of_its_own_or_an_error() {
        assert_eq!(cuda_ordinal(None, 1).unwrap(), 0);
        assert_eq!(cuda_ordinal(Some(0), 4).unwrap(), 0);
        assert_eq!(cuda_ordinal(Some(3), 4).unwrap(), 3);
        let error = cuda_ordinal(Some(2), 2).unwrap_err().to_string();
        assert!(
            error.contains("local rank 2 finds 2 CUDA device(s)"),
            "{error}"
        );
        assert!(error.contains("--backend"), "{error}");
    }
}
