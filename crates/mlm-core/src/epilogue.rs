//! What follows a linear layer's product in BERT's encoder, fused with the layer's bias: the
//! feed-forward's bias + GELU and the residual blocks' bias + residual add + LayerNorm
//! (Megatron-LM's `bias_gelu` and `bias_dropout_add` fusions, Shoeybi et al. 2019, without
//! dropout).
//!
//! Take the product from [`crate::linear()`] without its bias, then add the bias here. On
//! burn-flex (`flex` feature, `f32`) each function is one kernel and one autodiff operation,
//! whose parallel tasks add the bias to their rows as they read them (GELU in its kernel's
//! registers, keeping only the derivative for the backward; LayerNorm into one row's
//! buffer, with the residual): no bias rows are written under the product, and neither
//! `x W + b` nor the residual sum is ever a tensor of its own. The values are those of
//! the unfused ops, bit for bit where the product's inner dimension is at most 512 (the
//! product is then one sum, and `b + Σ` equals `Σ + b`). Elsewhere the same tensor ops as
//! unfused.

use burn::tensor::Tensor;

use crate::{gelu, layer_norm};

/// GELU (erf form, [`gelu`]) of `product + bias`: `product` `[..., d]` from
/// [`crate::linear()`] without a bias, `bias` `[d]` the linear layer's, added to each row.
/// BERT's `intermediate` block: `GELU(x W + b)`.
///
/// Under autodiff the backward gives `∂product = ∂y · GELU'(product + bias)` and
/// `∂bias = Σ_rows ∂product`, summed row after row as [`crate::linear()`]'s `∂b`.
///
/// # Shapes
/// - product, output: `[..., d]`; bias: `[d]`.
///
/// # Panics
/// If `bias` is not as long as `product`'s last dimension.
pub fn bias_gelu<const D: usize>(product: Tensor<D>, bias: Tensor<1>) -> Tensor<D> {
    check_length("bias_gelu", &product, ("bias", &bias));
    #[cfg(feature = "flex")]
    if crate::fused::on_flex(&product, &[product.dtype(), bias.dtype()]) {
        return crate::fused::flex_gelu(product, Some(bias));
    }
    gelu(product + along_rows(bias))
}

/// LayerNorm ([`layer_norm`]) of `product + bias + residual`, summed in that order:
/// `product` `[..., d]` from [`crate::linear()`] without a bias, `bias` `[d]` the linear
/// layer's, `residual` the block's input. BERT's post-LN residual block (`attention.output`
/// and `output` in Hugging Face's names): `LayerNorm(x W + b + residual)`, dropout 0.
///
/// Under autodiff the backward gives LayerNorm's `∂x` to both `product` and `residual`,
/// and `∂bias = Σ_rows ∂x`, summed row after row as [`crate::linear()`]'s `∂b`.
///
/// # Shapes
/// - product, residual, output: `[..., d]`; bias, gamma, beta: `[d]`.
///
/// # Panics
/// If `residual`'s shape is not `product`'s, or `bias`, `gamma` or `beta` is not as long as
/// its last dimension.
pub fn bias_residual_layer_norm<const D: usize>(
    product: Tensor<D>,
    bias: Tensor<1>,
    residual: Tensor<D>,
    (gamma, beta): (Tensor<1>, Tensor<1>),
    epsilon: f64,
) -> Tensor<D> {
    let function = "bias_residual_layer_norm";
    for vector in [("bias", &bias), ("gamma", &gamma), ("beta", &beta)] {
        check_length(function, &product, vector);
    }
    let (shape, residual_shape) = (product.dims(), residual.dims());
    assert!(
        shape == residual_shape,
        "{function}: the residual is {residual_shape:?}, the product {shape:?}"
    );
    #[cfg(feature = "flex")]
    {
        let dtypes = [&product, &residual].map(|t| t.dtype());
        let vector_dtypes = [&bias, &gamma, &beta].map(|t| t.dtype());
        if crate::fused::on_flex(&product, &[&dtypes[..], &vector_dtypes[..]].concat()) {
            let inputs = (product, gamma, beta);
            return crate::fused::flex_layer_norm(inputs, Some((bias, residual)), epsilon);
        }
    }
    layer_norm(product + along_rows(bias) + residual, gamma, beta, epsilon)
}

/// Panics, naming it, unless the vector (a bias, `γ` or `β`) is `[d]`, `product`'s last
/// dimension.
fn check_length<const D: usize>(
    function: &str,
    product: &Tensor<D>,
    (name, vector): (&str, &Tensor<1>),
) {
    let (d, len) = (product.dims()[D - 1], vector.dims()[0]);
    assert!(
        len == d,
        "{function}: {name} is [{len}], the product's last dimension {d}"
    );
}

/// `bias` `[d]` as `[1, ..., 1, d]`, to broadcast over the rows of a `[..., d]` tensor.
fn along_rows<const D: usize>(bias: Tensor<1>) -> Tensor<D> {
    let mut shape = [1; D];
    shape[D - 1] = bias.dims()[0];
    bias.reshape(shape)
}
