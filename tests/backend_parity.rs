//! The reference cross-entropy cases on `Autodiff<Wgpu>` equal the `Autodiff<NdArray>`
//! results within 1e-4. CI has no GPU: `.ci/run` installs `mesa-vulkan-drivers`, whose
//! lavapipe is a real Vulkan device on the CPU, so this runs real wgpu kernels.

mod common;

use burn::backend::{Autodiff, NdArray, Wgpu};
use common::{assert_close, fixture, run_cross_entropy_case};

#[test]
fn wgpu_matches_ndarray_on_every_reference_case() {
    let reference = fixture("cross_entropy.json");
    let wgpu_device = Default::default();
    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let cpu = run_cross_entropy_case::<Autodiff<NdArray>>(case, &Default::default()).unwrap();
        let gpu = run_cross_entropy_case::<Autodiff<Wgpu>>(case, &wgpu_device).unwrap();
        assert_eq!(gpu.n_graded, cpu.n_graded, "{name}: n_graded");
        assert_close(
            &format!("{name} mean"),
            &[gpu.mean],
            &[cpu.mean],
            1e-4,
            1e-4,
        );
        assert_close(&format!("{name} sum"), &[gpu.sum], &[cpu.sum], 1e-4, 1e-4);
        assert_close(&format!("{name} grad"), &gpu.grad, &cpu.grad, 1e-4, 1e-4);
    }
}
