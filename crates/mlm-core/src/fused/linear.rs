//! The linear layer's kernels over contiguous row-major `f32` data: `y = x W + b` and the
//! gradients of `x` and `W` (the bias's, a sum over rows, is flex's `row_sums`). Every output
//! is written whole by one gemm call, so none is zeroed first: the bias rows are the
//! product's starting value, and the gradients are products into fresh memory.

use super::product::{Matrix, product, product_new};

/// The shape of one linear call: `x [rows, d_in] · W [d_in, d_out]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub(super) rows: usize,
    pub(super) d_in: usize,
    pub(super) d_out: usize,
}

/// `y = x W (+ b)`, `[rows, d_out]`: the bias repeated over the rows, then the product
/// accumulated onto it.
pub(super) fn forward(x: &[f32], w: &[f32], bias: Option<&[f32]>, s: Shape) -> Vec<f32> {
    let (x, w) = (Matrix::new(x, s.d_in), Matrix::new(w, s.d_out));
    let Some(bias) = bias else {
        return product_new(x, w);
    };
    let mut y = bias.repeat(s.rows);
    product(&mut y, x, w, true);
    y
}

/// `∂x = ∂y Wᵀ`, `[rows, d_in]`.
pub(super) fn input_grad(dy: &[f32], w: &[f32], s: Shape) -> Vec<f32> {
    product_new(Matrix::new(dy, s.d_out), Matrix::new(w, s.d_out).t())
}

/// `∂W = xᵀ ∂y`, `[d_in, d_out]`.
pub(super) fn weight_grad(x: &[f32], dy: &[f32], s: Shape) -> Vec<f32> {
    product_new(Matrix::new(x, s.d_in).t(), Matrix::new(dy, s.d_out))
}
