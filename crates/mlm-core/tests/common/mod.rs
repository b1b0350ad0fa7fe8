//! Helpers shared by mlm-core's test files: the device (flex, the reference CPU backend;
//! Burn 0.22 deprecates ndarray), tensors from rows and labels, and
//! values read back.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use burn::tensor::{Device, Element, Int, Tensor, TensorData};

/// The tests' device: burn-flex, the reference CPU backend, with autodiff.
pub fn device() -> Device {
    Device::flex().autodiff()
}

/// Logits `[rows, vocab]` from their rows (f32 or f64 values, the device's float type).
pub fn logits<E: Element>(rows: &[&[E]]) -> Tensor<2> {
    let flat: Vec<E> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(
        TensorData::new(flat, [rows.len(), rows[0].len()]),
        &device(),
    )
}

/// Labels `[n]` (`-100` = not graded).
pub fn labels(values: &[i64]) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), &device())
}

/// A one-element integer tensor's value (a count of graded rows or correct predictions).
pub fn count(t: Tensor<1, Int>) -> i64 {
    t.into_scalar::<i64>()
}

/// A one-element float tensor's value (a loss).
pub fn scalar(t: Tensor<1>) -> f64 {
    t.into_scalar::<f64>()
}

/// Every value of `t`, row-major, as `E`.
pub fn values<E: Element, const D: usize>(t: Tensor<D>) -> Vec<E> {
    t.into_data().convert::<E>().try_into_vec::<E>().unwrap()
}
