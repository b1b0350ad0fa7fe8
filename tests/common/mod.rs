//! Shared helpers of the cross-crate tests: reference fixtures and tolerance checks.
#![allow(dead_code)] // each test binary uses its own subset

use burn::tensor::{Device, Int, Tensor, TensorData};
use mlm_core::{MaskedCrossEntropyConfig, MlmError};
use serde_json::Value;

/// The composed tensor ops on a CPU backend without kernels of ours (burn-ndarray, while
/// Burn ships it; the `ndarray` feature): PyTorch is the reference, ndarray only the backend
/// under test. Without the feature the composed ops are checked on wgpu (`backend_parity.rs`)
/// and, in f64, on flex.
#[cfg(feature = "ndarray")]
#[allow(deprecated)]
pub fn composed_device() -> Device {
    Device::ndarray().autodiff()
}

/// Reads a fixture copied from `../shared/reference/` (PyTorch, f32, CPU).
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_f64().expect("number") as f32)
        .collect()
}

pub fn ints(value: &Value) -> Vec<i64> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_i64().expect("integer"))
        .collect()
}

pub fn dims<const D: usize>(value: &Value) -> [usize; D] {
    let dims: Vec<usize> = ints(value).into_iter().map(|d| d as usize).collect();
    dims.try_into().expect("rank")
}

pub fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 data")
}

/// `|actual - expected| <= max(rel * |expected|, abs)` elementwise, with the first offender named.
pub fn assert_close(what: &str, actual: &[f32], expected: &[f32], rel: f32, abs: f32) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let tolerance = (rel * e.abs()).max(abs);
        assert!(
            (a - e).abs() <= tolerance,
            "{what}[{i}]: got {a}, expected {e} (|diff| {} > {tolerance})",
            (a - e).abs()
        );
    }
}

/// What one cross-entropy reference case gives on a backend.
pub struct CaseResult {
    pub mean: f32,
    pub sum: f32,
    pub n_graded: usize,
    pub grad: Vec<f32>,
}

/// Runs one case of `cross_entropy.json` on `device`: forward and the gradient of the mean.
pub fn run_cross_entropy_case(case: &Value, device: &Device) -> Result<CaseResult, MlmError> {
    let shape: [usize; 2] = dims(&case["shape"]);
    let logits = tensor::<2>(floats(&case["logits"]), shape, device).require_grad();
    let labels =
        Tensor::<1, Int>::from_data(TensorData::new(ints(&case["targets"]), [shape[0]]), device);
    let loss = MaskedCrossEntropyConfig::new()
        .with_label_smoothing(case["label_smoothing"].as_f64().unwrap())
        .init()?;
    let out = loss.forward_labels(logits.clone(), labels)?;
    let mean = to_vec(out.loss.clone().inner())[0];
    let sum = to_vec(out.loss_sum.inner())[0];
    let grads = out.loss.backward();
    let grad = logits
        .grad(&grads)
        .map(to_vec)
        .expect("the logits get a gradient, zero or not");
    Ok(CaseResult {
        mean,
        sum,
        n_graded: out.n_graded,
        grad,
    })
}

/// Every case of `cross_entropy.json` on `device` against PyTorch's mean, sum, graded count
/// and gradient of the mean, each within `rel` relative or `abs` absolute.
pub fn assert_every_cross_entropy_case_matches_pytorch(
    backend: &str,
    device: &Device,
    rel: f32,
    abs: f32,
) {
    let reference = fixture("cross_entropy.json");
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 11, "the fixture lost cases");
    for case in cases {
        let name = format!("{backend} {}", case["name"].as_str().unwrap());
        let got = run_cross_entropy_case(case, device).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            got.n_graded as u64,
            case["n_graded"].as_u64().unwrap(),
            "{name}: n_graded"
        );
        let expected = |key: &str| case[key].as_f64().unwrap() as f32;
        assert_close(
            &format!("{name} mean"),
            &[got.mean],
            &[expected("loss_mean")],
            rel,
            abs,
        );
        assert_close(
            &format!("{name} sum"),
            &[got.sum],
            &[expected("loss_sum")],
            rel,
            abs,
        );
        let expected_grad = floats(&case["grad_logits_of_mean"]);
        assert_close(&format!("{name} grad"), &got.grad, &expected_grad, rel, abs);
    }
}
