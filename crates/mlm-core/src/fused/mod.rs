//! Fused operations of the MLM step, each one sweep over its data instead of a chain of
//! tensor ops:
//! - the masked cross-entropy: one sweep over each row of logits gives the row's
//!   `-log p(true token)` and, in the same pass, its gradient `softmax − onehot`, which is all
//!   that backward needs (it only scales it): the idea of Liger-Kernel's fused linear
//!   cross-entropy (Hsu et al. 2024, §3.2), without the chunked matmul;
//! - GELU (erf form) and its exact derivative ([`crate::gelu`]);
//! - LayerNorm and its backward ([`crate::layer_norm`]);
//! - multi-head attention ([`crate::attention`]): per (sequence, head) two products around
//!   a softmax, reading the heads in place, and a backward that reuses the probabilities.
//!
//! Each has two implementations of one contract:
//! - plain tensor ops on any backend (autodiff derives the gradient): the reference, and what
//!   every backend without a kernel of its own runs ([`composed`] for the loss);
//! - burn-flex (`flex` feature): CPU kernels over contiguous `f32` data ([`cpu`]: vectorised,
//!   polynomial `exp` and `erf`, parallel over rows or chunks), each wired into burn's autodiff
//!   as one operation whose backward uses what the forward saved.
//!
//! The callers take any tensor: the kernel path is taken when the tensor lives on `Flex` or
//! `Autodiff<Flex, C>` (its device says which, at no cost; Burn 0.22's extension route then
//! hands over the backend's own primitive), so a backend needs no trait of ours to keep
//! working, and CubeCL kernels for wgpu and cuda can join the same way.

use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor};

/// Σ over rows of the label-smoothed negative log-likelihood, and how many rows the logits
/// rank first on their true token.
pub(crate) struct CrossEntropySum {
    /// `Σ_i (1 − ε)(lse_i − z_{i,t_i}) + ε (lse_i − mean_j z_{ij})`, nats, `[1]`.
    pub(crate) loss_sum: Tensor<1>,
    /// Rows whose arg-max (first maximum) is the target, `[1]`.
    pub(crate) n_correct: Tensor<1, Int>,
}

/// The summed cross-entropy of `logits` `[n, vocab]` (`n ≥ 1`) against `targets` `[n]`
/// (every one in `0..vocab`; the caller checks), label smoothing `ε` in `[0, 1]`. A fused
/// kernel where the backend has one, [`composed`] ops otherwise.
pub(crate) fn cross_entropy_sum(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    label_smoothing: f64,
) -> CrossEntropySum {
    #[cfg(feature = "flex")]
    if flex::on_flex(&logits, &[logits.dtype()]) {
        return flex::fused(logits, targets, label_smoothing);
    }
    composed(logits, targets, label_smoothing)
}

/// [`cross_entropy_sum`] in plain tensor ops: max-subtracted log-sum-exp, the true token
/// picked by `gather`.
pub(crate) fn composed(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    label_smoothing: f64,
) -> CrossEntropySum {
    let n_correct = logits
        .clone()
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(targets.clone())
        .int()
        .sum();
    // Log-softmax by max-subtracted log-sum-exp: log p_j = (z_j - max) - log Σ_k exp(z_k - max).
    let row_max = logits.clone().detach().max_dim(1);
    let shifted = logits - row_max;
    let log_sum_exp = shifted.clone().exp().sum_dim(1).log();
    // Pick the true token: -log p_t = log_sum_exp - (z_t - max).
    let true_shifted = shifted.clone().gather(1, targets.unsqueeze_dim(1));
    let mut nll = log_sum_exp.clone() - true_shifted;
    if label_smoothing > 0.0 {
        // -Σ_j (ε / V) log p_j = log_sum_exp - mean_j (z_j - max).
        let uniform_nll = log_sum_exp - shifted.mean_dim(1);
        nll = nll * (1.0 - label_smoothing) + uniform_nll * label_smoothing;
    }
    CrossEntropySum {
        loss_sum: nll.sum(),
        n_correct,
    }
}

/// [`cross_entropy_sum`] of the logits `hidden · weightᵀ + bias` (`hidden` `[n, d]`, `n ≥ 1`;
/// `weight` `[vocab, d]`; `bias` `[vocab]`), `chunk_rows ≥ 1` rows at a time: the logits are
/// never whole. The fused sweep on flex, [`composed_chunked`] elsewhere.
pub(crate) fn chunked_cross_entropy_sum(
    (hidden, weight, bias): (Tensor<2>, Tensor<2>, Tensor<1>),
    targets: Tensor<1, Int>,
    label_smoothing: f64,
    chunk_rows: usize,
) -> CrossEntropySum {
    #[cfg(feature = "flex")]
    if flex::on_flex(&hidden, &[hidden.dtype(), weight.dtype(), bias.dtype()]) {
        let inputs = (hidden, weight, bias);
        return flex::flex_chunked(inputs, targets, label_smoothing, chunk_rows);
    }
    composed_chunked((hidden, weight, bias), targets, label_smoothing, chunk_rows)
}

/// [`chunked_cross_entropy_sum`] in plain tensor ops, on any backend. Each chunk's logits,
/// off the autodiff graph, give their rows' loss ([`composed`]) and, when a gradient is
/// wanted, `g = softmax − (1 − ε) onehot − ε / vocab`, hence `∂/∂h = g W`, `∂/∂W += gᵀ h`
/// and `∂/∂b += Σ_rows g`. Those gradients enter the graph as `Σ x ⊙ ∂x` for each input
/// `x`, whose gradient is `∂x` and whose value is taken back out: autodiff then needs none
/// of the logits.
fn composed_chunked(
    (hidden, weight, bias): (Tensor<2>, Tensor<2>, Tensor<1>),
    targets: Tensor<1, Int>,
    eps: f64,
    chunk_rows: usize,
) -> CrossEntropySum {
    let tracked = hidden.is_tracked() || weight.is_tracked() || bias.is_tracked();
    let [n, _] = hidden.dims();
    let vocab = bias.dims()[0];
    let (h, w) = (hidden.clone().inner(), weight.clone().inner());
    let b = bias.clone().inner().unsqueeze_dim::<2>(0);
    let device = h.device();
    let mut loss_sum = Tensor::<1>::zeros([1], &device);
    let mut n_correct = Tensor::<1, Int>::zeros([1], &device);
    let (mut dh, mut dw, mut db) = (Vec::new(), Tensor::zeros(w.dims(), &device), b.zeros_like());
    for start in (0..n).step_by(chunk_rows) {
        let rows = chunk_rows.min(n - start);
        let (h, targets) = (
            h.clone().narrow(0, start, rows),
            targets.clone().narrow(0, start, rows),
        );
        let logits = h.clone().matmul(w.clone().transpose()) + b.clone();
        let chunk = composed(logits.clone(), targets.clone(), eps);
        loss_sum = loss_sum + chunk.loss_sum;
        n_correct = n_correct + chunk.n_correct;
        if tracked {
            let onehot = targets.one_hot::<2>(vocab).float();
            let g = softmax(logits, 1) - onehot * (1.0 - eps) - eps / vocab as f64;
            dh.push(g.clone().matmul(w.clone()));
            dw = dw + g.clone().transpose().matmul(h);
            db = db + g.sum_dim(0);
        }
    }
    if !hidden.is_autodiff() {
        return CrossEntropySum {
            loss_sum,
            n_correct,
        };
    }
    let mut loss_sum = Tensor::from_inner(loss_sum);
    if tracked {
        let injected = (hidden * Tensor::cat(dh, 0)).sum()
            + (weight * dw).sum()
            + (bias * db.squeeze_dim::<1>(0)).sum();
        loss_sum = loss_sum + injected.clone() - injected.detach();
    }
    CrossEntropySum {
        loss_sum,
        n_correct: Tensor::from_inner(n_correct),
    }
}

#[cfg(feature = "flex")]
mod attention;
#[cfg(feature = "flex")]
mod chunked;
#[cfg(feature = "flex")]
mod linear;
#[cfg(feature = "flex")]
mod product;
// The kernels' arithmetic: used by the flex kernels, and tested on its own.
#[cfg(any(feature = "flex", test))]
mod cpu;

#[cfg(feature = "flex")]
mod flex;
#[cfg(feature = "flex")]
pub(crate) use flex::{flex_attention, flex_gelu, flex_layer_norm, flex_linear, on_flex};

#[cfg(test)]
mod tests {
    use super::cpu::{
        cross_entropy_row, erf, exp, gelu, gelu_backward, layer_norm, layer_norm_backward, softmax,
        softmax_backward,
    };
    use std::mem::MaybeUninit;

    /// Room for `len` outputs of a kernel that writes them all.
    fn out(len: usize) -> Vec<MaybeUninit<f32>> {
        vec![MaybeUninit::uninit(); len]
    }

    /// A kernel's outputs, once it has written them all.
    fn written(out: &[MaybeUninit<f32>]) -> Vec<f32> {
        // SAFETY: every caller passes outputs its kernel wrote whole.
        out.iter().map(|x| unsafe { x.assume_init() }).collect()
    }

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        use super::cpu::{Tier, WIDEST, add_rows, cross_entropy_row_in_place, sum};
        // 1 000 + 7 values: whole 16-lane blocks and a tail.
        let n = 1007;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 97.0)
            .collect();
        let w: Vec<f32> = (0..n)
            .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 331.0)
            .collect();
        let run = |tier: Tier| -> Vec<u32> {
            WIDEST.with(|widest| widest.set(tier));
            let mut bits = Vec::new();
            let mut z = x.clone();
            let (nll, correct) = cross_entropy_row_in_place(&mut z, &w, 5, 0.1, true);
            bits.extend([nll.to_bits(), u32::from(correct)]);
            let (mut y, mut slope) = (out(n), out(n));
            gelu(&x, &w[..53], &mut y, Some(&mut slope));
            let (y, slope) = (written(&y), written(&slope));
            let mut dy = w.clone();
            gelu_backward(&mut dy, &slope);
            let (mut ln, mut x_hat, mut dx) = (out(n), out(n), out(n));
            let r = layer_norm(&x, &w, &x, 1e-12, &mut ln, &mut x_hat);
            let (mut d_gamma, mut d_beta) = (vec![0f32; n], vec![0f32; n]);
            let x_hat = written(&x_hat);
            layer_norm_backward(&w, &x_hat, r, &w, &mut dx, &mut d_gamma, &mut d_beta);
            let mut p = x.clone();
            softmax(&mut p, &w);
            let mut dp = w.clone();
            softmax_backward(&p, &mut dp);
            let mut sums = vec![0f32; 19];
            add_rows(&mut sums, &x[..19 * 53]);
            let mut three = vec![0f32; n];
            sum(&mut three, &x, &w, &dy);
            let outputs = [
                z,
                y,
                slope,
                dy,
                written(&ln),
                x_hat,
                written(&dx),
                d_gamma,
                p,
                dp,
                sums,
                three,
            ];
            bits.push(r.to_bits());
            bits.extend(outputs.iter().flatten().map(|v| v.to_bits()));
            bits
        };
        let plain = run(Tier::Plain);
        assert_eq!(run(Tier::Avx2), plain, "AVX2 against plain");
        assert_eq!(run(Tier::Avx512), plain, "AVX-512 against plain");
        WIDEST.with(|widest| widest.set(Tier::Avx512));
    }

    #[test]
    fn the_polynomial_exp_is_within_2_ulp_of_libm() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            assert!(
                (got - want).abs() <= 2.0 * f32::EPSILON * want,
                "exp({x}) = {got}, libm {want}"
            );
            x += 0.013;
        }
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(-1e4) < 1e-37);
    }

    #[test]
    fn a_row_gives_the_seed_example_and_its_gradient() {
        // Logits (2, 1, 0), true token 0: -log softmax = 0.407606, gradient softmax - onehot.
        let mut g = [0f32; 3];
        let (nll, correct) = cross_entropy_row(&[2.0, 1.0, 0.0], 0, 0.0, Some(&mut g));
        assert!((nll - 0.407_606).abs() < 1e-6, "{nll}");
        assert!(correct);
        for (got, want) in g.iter().zip([-0.334_759, 0.244_728, 0.090_031]) {
            assert!((got - want).abs() < 1e-6, "{g:?}");
        }
    }

    #[test]
    fn erf_is_within_4e_7_of_libm() {
        let mut x = -6.0f64;
        let mut worst = (0.0, 0.0);
        while x < 6.0 {
            let error = (f64::from(erf(x as f32)) - libm::erf(f64::from(x as f32))).abs();
            worst = if error > worst.0 { (error, x) } else { worst };
            x += 0.001;
        }
        assert!(
            worst.0 < 4e-7,
            "erf({}) is {:e} off libm's",
            worst.1,
            worst.0
        );
        assert!(erf(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_and_its_derivative_match_the_erf_formula_in_f64() {
        // 2 001 values in 23 rows of 87, each row shifted by its bias.
        let x: Vec<f32> = (0..2001).map(|i| -7.0 + 0.007 * i as f32).collect();
        let bias: Vec<f32> = (0..87).map(|j| (j as f32 - 43.0) / 43.0).collect();
        let u: Vec<f32> = x
            .iter()
            .zip(bias.iter().cycle())
            .map(|(&x, &b)| x + b)
            .collect();
        let n = x.len();
        let (mut y, mut slope) = (out(n), out(n));
        gelu(&x, &bias, &mut y, Some(&mut slope));
        let (y, slope) = (written(&y), written(&slope));
        let (mut y_of_u, mut slope_of_u, mut y_alone) = (out(n), out(n), out(n));
        gelu(&u, &[], &mut y_of_u, Some(&mut slope_of_u));
        gelu(&x, &bias, &mut y_alone, None);
        assert_eq!(
            y,
            written(&y_of_u),
            "the bias added as the kernel reads x is x + b"
        );
        assert_eq!(slope, written(&slope_of_u), "and so is its slope");
        assert_eq!(
            y,
            written(&y_alone),
            "keeping the slope changes no output bit"
        );
        let mut dy = vec![0.5f32; n];
        gelu_backward(&mut dy, &slope);
        for ((&u, &y), &dy) in u.iter().zip(&y).zip(&dy) {
            let u = f64::from(u);
            let cdf = 0.5 * (1.0 + libm::erf(u / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * u * u).exp() / (2.0 * std::f64::consts::PI).sqrt();
            assert!(
                (f64::from(y) - u * cdf).abs() < 1e-6 * (1.0 + u.abs()),
                "gelu({u})"
            );
            assert!(
                (f64::from(dy) - 0.5 * (cdf + u * pdf)).abs() < 1e-6,
                "gelu'({u})"
            );
        }
    }

    #[test]
    fn a_softmax_row_gives_padded_keys_exactly_zero_and_its_backward_the_jacobian_product() {
        let mut p = [1.0f32, 2.0, 3.0];
        softmax(&mut p, &[0.0, 0.0, -1e9]);
        let z = 1f64.exp() + 2f64.exp();
        assert_eq!(p[2], 0.0);
        for (got, want) in p.iter().zip([1f64.exp() / z, 2f64.exp() / z]) {
            assert!((f64::from(*got) - want).abs() < 1e-7, "{p:?}");
        }
        // ∂L/∂s_i = Σ_j d_j ∂p_j/∂s_i = p_i (d_i − Σ_j d_j p_j).
        let mut d = [0.5f32, -1.0, 2.0];
        softmax_backward(&p, &mut d);
        let dot = 0.5 * f64::from(p[0]) - f64::from(p[1]);
        for (i, want) in [0.5, -1.0].iter().enumerate() {
            let want = f64::from(p[i]) * (want - dot);
            assert!((f64::from(d[i]) - want).abs() < 1e-7, "{d:?}");
        }
        assert_eq!(d[2], 0.0);
    }

    #[test]
    fn a_layer_norm_row_and_its_backward_match_the_formula_and_finite_differences() {
        let (x, gamma, beta) = (
            [1.0f32, 2.0, 3.0, 7.0],
            [0.5f32, 1.0, 1.5, 2.0],
            [0.1f32; 4],
        );
        let run = |x: &[f32]| {
            let (mut y, mut x_hat) = (out(4), out(4));
            let r = layer_norm(x, &gamma, &beta, 1e-12, &mut y, &mut x_hat);
            (written(&y), written(&x_hat), r)
        };
        let (y, x_hat, r) = run(&x);
        // mean 3.25, biased variance 5.1875.
        assert!((r - 1.0 / 5.1875f32.sqrt()).abs() < 1e-6);
        for i in 0..4 {
            let want = (f64::from(x[i]) - 3.25) / 5.1875f64.sqrt() * f64::from(gamma[i]) + 0.1;
            assert!((f64::from(y[i]) - want).abs() < 1e-6, "{y:?}");
        }
        // Backward of L = Σ w ⊙ y against central differences.
        let w = [0.3f32, -1.2, 0.7, 2.0];
        let (mut dx, mut d_gamma, mut d_beta) = (out(4), [0f32; 4], [0f32; 4]);
        layer_norm_backward(&w, &x_hat, r, &gamma, &mut dx, &mut d_gamma, &mut d_beta);
        let dx = written(&dx);
        let loss =
            |x: &[f32]| -> f64 { run(x).0.iter().zip(&w).map(|(y, w)| f64::from(y * w)).sum() };
        for i in 0..4 {
            let (mut up, mut down) = (x, x);
            up[i] += 1e-2;
            down[i] -= 1e-2;
            let numeric = (loss(&up) - loss(&down)) / 2e-2;
            assert!(
                (f64::from(dx[i]) - numeric).abs() < 2e-3,
                "∂x[{i}] {} vs {numeric}",
                dx[i]
            );
            assert!((d_gamma[i] - w[i] * x_hat[i]).abs() < 1e-7);
            assert_eq!(d_beta[i], w[i]);
        }
    }
}
