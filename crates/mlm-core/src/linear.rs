//! The linear layer's product, `y = x W + b` over the last dimension: Burn's `Linear`
//! forward (its weight `[d_in, d_out]`, as `burn::nn::Linear` stores it), with a kernel of its
//! own on burn-flex.

use burn::tensor::Tensor;

/// `x W + b`, each row of `x` times `weight`, plus `bias` if given (Burn's
/// `burn::tensor::module::linear`, the same numbers on every backend but burn-flex).
///
/// On burn-flex (`flex` feature, `f32`) one kernel and, under autodiff, one operation: the
/// product accumulates onto the bias rows (no add pass after it), and no output or gradient
/// is zeroed before gemm writes it whole. Elsewhere Burn's own `linear`.
///
/// # Shapes
/// - `x`: `[..., d_in]`; `weight`: `[d_in, d_out]`; `bias`: `[d_out]`
/// - output: `[..., d_out]`
///
/// # Panics
/// If `x`'s last dimension is not `d_in` or `bias` is not `[d_out]`.
pub fn linear<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    let [d_in, d_out] = weight.dims();
    let x_in = x.dims()[D - 1];
    assert!(
        x_in == d_in,
        "linear: x's last dimension is {x_in}, the weight is [{d_in}, {d_out}]"
    );
    if let Some(bias) = &bias {
        let len = bias.dims()[0];
        assert!(
            len == d_out,
            "linear: bias is [{len}], the weight is [{d_in}, {d_out}]"
        );
    }
    #[cfg(feature = "flex")]
    {
        let bias_dtype = bias.as_ref().map_or(x.dtype(), |b| b.dtype());
        if D >= 2 && crate::fused::on_flex(&x, &[x.dtype(), weight.dtype(), bias_dtype]) {
            return crate::fused::flex_linear(x, weight, bias);
        }
    }
    burn::tensor::module::linear(x, weight, bias)
}
