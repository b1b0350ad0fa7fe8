//! The masked cross-entropy's arithmetic, fused: one sweep over each row of logits gives the
//! row's `-log p(true token)` and, in the same pass, its gradient `softmax − onehot`, which
//! is all that backward needs (it only scales it). The idea of Liger-Kernel's fused linear
//! cross-entropy (Hsu et al. 2024, §3.2), without the chunked matmul.
//!
//! Two implementations of one contract:
//! - [`composed`]: plain tensor ops on any backend (autodiff derives the gradient). It is
//!   the reference, and what every backend without a kernel of its own runs;
//! - burn-flex (`flex` feature): a CPU kernel over contiguous `f32` rows, vectorised
//!   (polynomial `exp`, lane-wise max and sum) and parallel over rows, wired into burn's
//!   autodiff as one operation whose backward multiplies the saved gradient by the
//!   incoming one. Both reach it through [`cross_entropy_sum`]; other backends need no
//!   trait bound or code to keep working.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// Σ over rows of the label-smoothed negative log-likelihood, and how many rows the logits
/// rank first on their true token.
pub(crate) struct CrossEntropySum<B: Backend> {
    /// `Σ_i (1 − ε)(lse_i − z_{i,t_i}) + ε (lse_i − mean_j z_{ij})`, nats, `[1]`.
    pub(crate) loss_sum: Tensor<B, 1>,
    /// Rows whose arg-max (first maximum) is the target, `[1]`.
    pub(crate) n_correct: Tensor<B, 1, Int>,
}

/// The summed cross-entropy of `logits` `[n, vocab]` (`n ≥ 1`) against `targets` `[n]`
/// (every one in `0..vocab`; the caller checks), label smoothing `ε` in `[0, 1]`. A fused
/// kernel where `B` has one, [`composed`] ops otherwise.
pub(crate) fn cross_entropy_sum<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    label_smoothing: f64,
) -> CrossEntropySum<B> {
    #[cfg(feature = "flex")]
    let (logits, targets) = match flex::try_fused(logits, targets, label_smoothing) {
        Ok(fused) => return fused,
        Err(inputs) => inputs,
    };
    composed(logits, targets, label_smoothing)
}

/// [`cross_entropy_sum`] in plain tensor ops: max-subtracted log-sum-exp, the true token
/// picked by `gather`.
pub(crate) fn composed<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    label_smoothing: f64,
) -> CrossEntropySum<B> {
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

/// The row kernel: plain `f32` arithmetic written so that the compiler vectorises it
/// (16 independent lanes for the max and the sums, a branch-free `exp`).
pub(crate) mod rows {
    const LANES: usize = 16;

    /// `exp(x)` to about 2 ulp for `x ≤ 88` (Cephes' `expf`: `2^n · p(r)`, `r = x − n ln 2`,
    /// degree-6 polynomial); below −87 it returns `exp(−87) ≈ 1.6e-38` rather than 0, and
    /// NaN stays NaN.
    #[inline(always)]
    pub(crate) fn exp(x: f32) -> f32 {
        const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer.
        let x = if x < -87.0 { -87.0 } else { x };
        let x = if x > 88.0 { 88.0 } else { x };
        let t = x * std::f32::consts::LOG2_E + MAGIC;
        let n = t - MAGIC;
        let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
        let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
            + 1.666_666_5e-1)
            * r
            + 0.5;
        let p = p * r * r + r + 1.0;
        let n = t.to_bits() as i32 - MAGIC.to_bits() as i32;
        p * f32::from_bits(((n + 127) << 23) as u32)
    }

    /// One row `z` with true token `target`: returns `(nll, arg-max == target)` and, when
    /// `gradient` is given, writes `∂nll/∂z = softmax(z) − (1 − ε)·onehot − ε/V` into it.
    /// Everything after the maximum is computed on `z − max`, so logits of ±1e4 lose nothing
    /// to cancellation.
    #[inline(always)]
    pub(crate) fn row(
        z: &[f32],
        target: usize,
        eps: f32,
        gradient: Option<&mut [f32]>,
    ) -> (f32, bool) {
        let max = row_max(z);
        let first_max = z.iter().position(|&x| x == max).unwrap_or(0);
        let (sum_exp, sum_shifted) = match gradient {
            Some(g) => {
                let sums = exp_into(z, max, g);
                let (inv, uniform) = (1.0 / sums.0, eps / z.len() as f32);
                g.iter_mut().for_each(|x| *x = *x * inv - uniform);
                g[target] -= 1.0 - eps;
                sums
            }
            None => exp_into(z, max, &mut []),
        };
        // -log p_t = log Σ exp(z - max) - (z_t - max); the uniform part uses mean_j (z_j - max).
        let log_sum_exp = sum_exp.ln();
        let nll = (1.0 - eps) * (log_sum_exp - (z[target] - max))
            + eps * (log_sum_exp - sum_shifted / z.len() as f32);
        (nll, first_max == target)
    }

    /// `max_j z_j`, lane-wise (NaN entries are skipped here and surface in the sums).
    #[inline(always)]
    fn row_max(z: &[f32]) -> f32 {
        let mut max = [f32::NEG_INFINITY; LANES];
        let chunks = z.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for j in 0..LANES {
                max[j] = if chunk[j] > max[j] { chunk[j] } else { max[j] };
            }
        }
        max.iter()
            .chain(tail)
            .fold(f32::NEG_INFINITY, |a, &b| a.max(b))
    }

    /// `(Σ exp(z − max), Σ (z − max))`, writing `exp(z − max)` into `out` unless it is empty.
    #[inline(always)]
    fn exp_into(z: &[f32], max: f32, out: &mut [f32]) -> (f32, f32) {
        let (mut sum_exp, mut sum_shifted) = ([0f32; LANES], [0f32; LANES]);
        let mut lane = [0f32; LANES];
        let done = z.len() / LANES * LANES;
        for (c, x) in z.chunks_exact(LANES).enumerate() {
            for j in 0..LANES {
                lane[j] = exp(x[j] - max);
                sum_exp[j] += lane[j];
                sum_shifted[j] += x[j] - max;
            }
            if !out.is_empty() {
                out[c * LANES..(c + 1) * LANES].copy_from_slice(&lane);
            }
        }
        let (mut e, mut s): (f32, f32) = (sum_exp.iter().sum(), sum_shifted.iter().sum());
        for (i, &x) in z.iter().enumerate().skip(done) {
            let v = exp(x - max);
            if !out.is_empty() {
                out[i] = v;
            }
            e += v;
            s += x - max;
        }
        (e, s)
    }

    /// [`row`] compiled for AVX2 + FMA (8 lanes of `f32` per instruction).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn row_avx2(
        z: &[f32],
        target: usize,
        eps: f32,
        gradient: Option<&mut [f32]>,
    ) -> (f32, bool) {
        row(z, target, eps, gradient)
    }

    /// [`row`] at the best width this CPU has.
    pub(crate) fn row_dispatch(
        z: &[f32],
        target: usize,
        eps: f32,
        gradient: Option<&mut [f32]>,
    ) -> (f32, bool) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: both features were just detected.
            return unsafe { row_avx2(z, target, eps, gradient) };
        }
        row(z, target, eps, gradient)
    }
}

#[cfg(feature = "flex")]
pub(crate) use flex::flex_gelu;

#[cfg(feature = "flex")]
mod flex {
    //! burn-flex's kernel and its autodiff operation.

    use std::any::Any;

    use burn::backend::Autodiff;
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
    use burn::tensor::activation::gelu;
    use burn::tensor::backend::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::{DType, Int, Shape, Tensor, TensorData, TensorPrimitive};
    use burn_flex::Flex;
    use rayon::prelude::*;

    use super::CrossEntropySum;
    use super::rows::row_dispatch;

    type Inputs<B> = (Tensor<B, 2>, Tensor<B, 1, Int>);

    /// The fused path when `B` is `Flex` or `Autodiff<Flex>` and the logits are `f32`;
    /// the inputs back otherwise. (`Any` tells the types apart at no cost, so callers stay
    /// generic over `B: Backend`.)
    pub(super) fn try_fused<B: Backend>(
        logits: Tensor<B, 2>,
        targets: Tensor<B, 1, Int>,
        eps: f64,
    ) -> Result<CrossEntropySum<B>, Inputs<B>> {
        if logits.dtype() != DType::F32 {
            return Err((logits, targets));
        }
        let inputs: Box<dyn Any> = Box::new((logits, targets));
        let inputs = match inputs.downcast::<Inputs<Autodiff<Flex>>>() {
            Ok(inputs) => return Ok(cast(tracked(inputs.0, inputs.1, eps))),
            Err(other) => other,
        };
        match inputs.downcast::<Inputs<Flex>>() {
            Ok(inputs) => {
                let (loss_sum, _, n_correct) = kernel(inputs.0, inputs.1, eps, false);
                Ok(cast(CrossEntropySum {
                    loss_sum,
                    n_correct,
                }))
            }
            Err(other) => Err(*other.downcast::<Inputs<B>>().expect("B's own inputs")),
        }
    }

    /// burn's one-operation `gelu` when `B` is `Flex` or `Autodiff<Flex>` (burn-flex's
    /// backward is the exact erf derivative); `x` back otherwise.
    pub(crate) fn flex_gelu<B: Backend, const D: usize>(
        x: Tensor<B, D>,
    ) -> Result<Tensor<B, D>, Tensor<B, D>> {
        let x: Box<dyn Any> = Box::new(x);
        let y: Box<dyn Any> = match x.downcast::<Tensor<Autodiff<Flex>, D>>() {
            Ok(x) => Box::new(gelu(*x)),
            Err(x) => match x.downcast::<Tensor<Flex, D>>() {
                Ok(x) => Box::new(gelu(*x)),
                Err(x) => return Err(*x.downcast::<Tensor<B, D>>().expect("B's own tensor")),
            },
        };
        Ok(*y.downcast::<Tensor<B, D>>().expect("the same type"))
    }

    /// `CrossEntropySum<C>` as `CrossEntropySum<B>` where `C` is `B`.
    fn cast<C: Backend, B: Backend>(sum: CrossEntropySum<C>) -> CrossEntropySum<B> {
        let parts: Box<dyn Any> = Box::new((sum.loss_sum, sum.n_correct));
        let (loss_sum, n_correct) = *parts
            .downcast::<(Tensor<B, 1>, Tensor<B, 1, Int>)>()
            .expect("C is B");
        CrossEntropySum {
            loss_sum,
            n_correct,
        }
    }

    /// Runs the kernel on the logits' values and records one autodiff operation whose
    /// backward is `saved gradient × incoming gradient`.
    fn tracked(
        logits: Tensor<Autodiff<Flex>, 2>,
        targets: Tensor<Autodiff<Flex>, 1, Int>,
        eps: f64,
    ) -> CrossEntropySum<Autodiff<Flex>> {
        let values = logits.clone().inner();
        let (targets, node) = (targets.inner(), logits.into_primitive().tensor().node);
        let op = SavedGradient.prepare::<NoCheckpointing>([node]);
        let (loss_sum, n_correct) = match op.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (loss_sum, gradient, n_correct) = kernel(values, targets, eps, true);
                let gradient = gradient.expect("asked for").into_primitive().tensor();
                (
                    prep.finish(gradient, loss_sum.into_primitive().tensor()),
                    n_correct,
                )
            }
            OpsKind::UnTracked(prep) => {
                let (loss_sum, _, n_correct) = kernel(values, targets, eps, false);
                (prep.finish(loss_sum.into_primitive().tensor()), n_correct)
            }
        };
        CrossEntropySum {
            loss_sum: Tensor::from_primitive(TensorPrimitive::Float(loss_sum)),
            n_correct: Tensor::from_inner(n_correct),
        }
    }

    /// Backward of the fused loss: its state is `∂ loss_sum / ∂ logits`, `[n, vocab]`.
    #[derive(Debug)]
    struct SavedGradient;

    impl Backward<Flex, 1> for SavedGradient {
        type State = FloatTensor<Flex>;

        fn backward(
            self,
            ops: Ops<Self::State, 1>,
            grads: &mut Gradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let gradient = ops.state;
            unary::<Flex, _>(ops.parents, ops.node, grads, |incoming| {
                let incoming = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(incoming));
                let gradient = Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(gradient));
                (gradient * incoming.unsqueeze::<2>())
                    .into_primitive()
                    .tensor()
            });
        }
    }

    /// `(loss_sum [1], gradient [n, vocab] when asked, n_correct [1])` of `f32` logits, rows
    /// in parallel.
    fn kernel(
        logits: Tensor<Flex, 2>,
        targets: Tensor<Flex, 1, Int>,
        eps: f64,
        wants_gradient: bool,
    ) -> (
        Tensor<Flex, 1>,
        Option<Tensor<Flex, 2>>,
        Tensor<Flex, 1, Int>,
    ) {
        let [n, vocab] = logits.dims();
        let device = logits.device();
        let targets = targets
            .into_data()
            .convert::<i64>()
            .into_vec::<i64>()
            .expect("an Int tensor converts to i64");
        let logits = logits.into_primitive().tensor().to_contiguous();
        let z: &[f32] = logits.as_slice().expect("contiguous f32 logits");
        let eps = eps as f32;
        let per_row = |(z, &t): (&[f32], &i64), g: Option<&mut [f32]>| {
            let (nll, correct) = row_dispatch(z, t as usize, eps, g);
            (f64::from(nll), usize::from(correct))
        };
        let add = |a: (f64, usize), b: (f64, usize)| (a.0 + b.0, a.1 + b.1);
        let rows = z.par_chunks(vocab).zip(targets.par_iter());
        let (loss_sum, n_correct, gradient) = if wants_gradient {
            let mut g = vec![0f32; n * vocab];
            let (loss_sum, n_correct) = rows
                .zip(g.par_chunks_mut(vocab))
                .map(|(r, g)| per_row(r, Some(g)))
                .reduce(|| (0.0, 0), add);
            (loss_sum, n_correct, Some(g))
        } else {
            let (loss_sum, n_correct) = rows.map(|r| per_row(r, None)).reduce(|| (0.0, 0), add);
            (loss_sum, n_correct, None)
        };
        let gradient = gradient
            .map(|g| Tensor::from_data(TensorData::new(g, Shape::new([n, vocab])), &device));
        (
            Tensor::from_data(TensorData::new(vec![loss_sum as f32], [1]), &device),
            gradient,
            Tensor::from_data(TensorData::new(vec![n_correct as i64], [1]), &device),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::rows::{exp, row};

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
        let (nll, correct) = row(&[2.0, 1.0, 0.0], 0, 0.0, Some(&mut g));
        assert!((nll - 0.407_606).abs() < 1e-6, "{nll}");
        assert!(correct);
        for (got, want) in g.iter().zip([-0.334_759, 0.244_728, 0.090_031]) {
            assert!((got - want).abs() < 1e-6, "{g:?}");
        }
    }
}
