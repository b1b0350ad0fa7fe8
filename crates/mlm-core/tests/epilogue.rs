//! The fused epilogues of a linear layer ([`bias_gelu`], [`bias_residual_layer_norm`], and
//! the query, key and value bias that [`multi_head_attention_qkv_packed`] adds) against the
//! unfused ops: bit for bit in `f32` on flex (values and every gradient), and against the
//! same formulas composed in `f64` (the kernels take `f32` only, so `f64` runs the tensor ops).

use burn::tensor::{DType, Distribution, Tensor, TensorData};
use mlm_core::attention::PADDING_BIAS;
use mlm_core::{
    bias_gelu, bias_residual_layer_norm, gelu, layer_norm, linear, multi_head_attention_qkv_packed,
};

mod common;
use common::{device, values};

/// Rows a sequence: the 362 rows span 2 tasks of the GELU kernel and 6 of LayerNorm's.
const ROWS: usize = 181;
const D_IN: usize = 24;
/// Also `3 · d_model` for attention: d_model 16, two heads of 8.
const D_OUT: usize = 48;

/// Inputs of one epilogue: `x [2, ROWS, D_IN]`, `W [D_IN, D_OUT]`, `b, γ, β [D_OUT]`,
/// `residual [2, ROWS, D_OUT]`, seeded normal values (standard deviation 0.2 for `W`, 1
/// elsewhere).
struct Inputs {
    data: Vec<(TensorData, Vec<usize>)>,
}

impl Inputs {
    fn new(seed: u64) -> Self {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        let shapes = [
            vec![2, ROWS, D_IN],
            vec![D_IN, D_OUT],
            vec![D_OUT],
            vec![D_OUT],
            vec![D_OUT],
            vec![2, ROWS, D_OUT],
        ];
        let data = shapes
            .into_iter()
            .map(|shape| {
                // The weight at BERT's initial scale, so that attention's scores stay soft.
                let std = if shape == [D_IN, D_OUT] { 0.2 } else { 1.0 };
                let normal = Distribution::Normal(0.0, std);
                (
                    TensorData::random::<f64, _, _>(shape.clone(), normal, &mut rng),
                    shape,
                )
            })
            .collect();
        Self { data }
    }

    /// The inputs as tracked tensors of `dtype`.
    fn tensors(&self, dtype: DType) -> Tracked {
        let t = |i: usize| -> TensorData { self.data[i].0.clone() };
        let d = (&device(), dtype);
        Tracked {
            x: Tensor::<3>::from_data(t(0), d).require_grad(),
            w: Tensor::<2>::from_data(t(1), d).require_grad(),
            b: Tensor::<1>::from_data(t(2), d).require_grad(),
            gamma: Tensor::<1>::from_data(t(3), d).require_grad(),
            beta: Tensor::<1>::from_data(t(4), d).require_grad(),
            residual: Tensor::<3>::from_data(t(5), d).require_grad(),
        }
    }
}

/// Tracked inputs of one epilogue.
#[derive(Clone)]
struct Tracked {
    x: Tensor<3>,
    w: Tensor<2>,
    b: Tensor<1>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    residual: Tensor<3>,
}

/// The output's values and, for the loss `Σ output ⊙ weights` (weights seeded), the gradients
/// of `x, W, b, γ, β, residual` (empty for an input the output does not use), as `f64`.
fn run(inputs: &Tracked, f: impl Fn(&Tracked) -> Tensor<3>) -> Vec<Vec<f64>> {
    let y = f(inputs);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(99);
    let weights = TensorData::random::<f64, _, _>(y.dims(), Distribution::Default, &mut rng);
    let weights = Tensor::<3>::from_data(weights, (&device(), y.dtype()));
    let grads = (y.clone() * weights).sum().backward();
    let t = inputs.clone();
    let grad = |g: Option<Tensor<3>>| g.map_or(vec![], values::<f64, 3>);
    let grad1 = |g: Option<Tensor<1>>| g.map_or(vec![], values::<f64, 1>);
    vec![
        values::<f64, 3>(y),
        grad(t.x.grad(&grads)),
        t.w.grad(&grads).map_or(vec![], values::<f64, 2>),
        grad1(t.b.grad(&grads)),
        grad1(t.gamma.grad(&grads)),
        grad1(t.beta.grad(&grads)),
        grad(t.residual.grad(&grads)),
    ]
}

/// The feed-forward's `GELU(x W + b)` (`"bias_gelu"`), attention over the packed
/// `x W + b` (`"attention"`, the last three keys of the second sequence padding) or the
/// residual block's `LayerNorm(residual + x W + b)`, fused or not.
fn epilogue(block: &str, fused: bool, t: &Tracked) -> Tensor<3> {
    let (x, w, b) = (t.x.clone(), t.w.clone(), t.b.clone());
    let norm = (t.gamma.clone(), t.beta.clone());
    let padding: Vec<f64> = (0..2 * ROWS)
        .map(|i| if i >= 2 * ROWS - 3 { PADDING_BIAS } else { 0.0 })
        .collect();
    let key_bias =
        Tensor::<2>::from_data(TensorData::new(padding, [2, ROWS]), (&device(), x.dtype()));
    match (block, fused) {
        ("attention", true) => {
            multi_head_attention_qkv_packed(linear(x, w, None), Some(b), key_bias, 2)
        }
        ("attention", false) => {
            multi_head_attention_qkv_packed(linear(x, w, Some(b)), None, key_bias, 2)
        }
        ("bias_gelu", true) => bias_gelu(linear(x, w, None), b),
        ("bias_gelu", false) => gelu(linear(x, w, Some(b))),
        (_, true) => {
            let product = linear(x, w, None);
            bias_residual_layer_norm(product, b, t.residual.clone(), norm, 1e-12)
        }
        (_, false) => layer_norm(
            t.residual.clone() + linear(x, w, Some(b)),
            norm.0,
            norm.1,
            1e-12,
        ),
    }
}

#[test]
fn fused_epilogues_give_the_unfused_bits_and_the_f64_values() {
    let inputs = Inputs::new(3);
    let names = ["output", "∂x", "∂W", "∂b", "∂γ", "∂β", "∂residual"];
    for block in ["bias_gelu", "attention", "bias_residual_layer_norm"] {
        let at = |dtype, fused| run(&inputs.tensors(dtype), |t| epilogue(block, fused, t));
        let (fused, unfused) = (at(DType::F32, true), at(DType::F32, false));
        let reference = at(DType::F64, true);
        for (i, name) in names.iter().enumerate() {
            let differs = fused[i]
                .iter()
                .zip(&unfused[i])
                .position(|(a, b)| (*a as f32).to_bits() != (*b as f32).to_bits());
            assert_eq!(
                differs, None,
                "{block}: {name}, the first value whose bits differ"
            );
            assert_eq!(fused[i].len(), unfused[i].len(), "{block}: {name}");
            assert_eq!(fused[i].len(), reference[i].len(), "{block}: {name}");
            for (j, (got, want)) in fused[i].iter().zip(&reference[i]).enumerate() {
                assert!(
                    (got - want).abs() <= 2e-5 * (1.0 + want.abs()),
                    "{block}: {name}[{j}] is {got}, f64 {want}"
                );
            }
        }
        let used = fused.iter().filter(|g| !g.is_empty()).count();
        let inputs_used = if block == "bias_residual_layer_norm" {
            7
        } else {
            4
        };
        assert_eq!(used, inputs_used, "{block}");
    }
}

#[test]
#[should_panic(expected = "bias_residual_layer_norm: the residual is [2, 181, 47]")]
fn a_residual_of_another_shape_is_refused() {
    let t = Inputs::new(4).tensors(DType::F32);
    let residual = t.residual.narrow(2, 0, D_OUT - 1);
    let product = linear(t.x, t.w, None);
    bias_residual_layer_norm(product, t.b, residual, (t.gamma, t.beta), 1e-12);
}

#[test]
#[should_panic(expected = "bias_gelu: bias is [47], the product's last dimension 48")]
fn a_bias_of_another_length_is_refused() {
    let t = Inputs::new(5).tensors(DType::F32);
    bias_gelu(linear(t.x, t.w, None), t.b.narrow(0, 0, D_OUT - 1));
}

#[test]
#[should_panic(
    expected = "bias_residual_layer_norm: gamma is [47], the product's last dimension 48"
)]
fn a_gamma_of_another_length_is_refused_by_name() {
    let t = Inputs::new(6).tensors(DType::F32);
    let product = linear(t.x, t.w, None);
    let gamma = t.gamma.narrow(0, 0, D_OUT - 1);
    bias_residual_layer_norm(product, t.b, t.residual, (gamma, t.beta), 1e-12);
}
