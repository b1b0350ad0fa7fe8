//! The CPU kernels' arithmetic: plain `f32` code written so that the compiler vectorises it
//! (16 independent lanes for maxima and sums, branch-free `exp` and `erf`), compiled twice more,
//! for AVX2 + FMA and for AVX-512, and picked at run time (the same bits on every tier).
//!
//! - [`cross_entropy_row`]: one row of the fused cross-entropy, `-log p(true token)` and its
//!   gradient;
//! - [`gelu`] and [`gelu_backward`] over slices: GELU in its erf form and its exact
//!   derivative, which the backward multiplies into the incoming gradient.

use std::mem::MaybeUninit;

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
/// `gradient` is given, writes `∂nll/∂z = softmax(z) − (1 − ε)·onehot − ε/V` into it
/// ([`row_in_place`] on a copy of `z`).
#[inline(always)]
fn row(z: &[f32], target: usize, eps: f32, gradient: Option<&mut [f32]>) -> (f32, bool) {
    if let Some(g) = gradient {
        g.copy_from_slice(z);
        return row_in_place(g, &[], target, eps, true);
    }
    let max = lane_max(z);
    let sums = exp_sums(z, max);
    row_loss(
        sums,
        z[target] - max,
        z.len(),
        eps,
        is_first_max(z, max, target),
    )
}

/// [`row`] of the logits `z + bias` (`bias` empty: none), which are written over `z`, and
/// with `gradient` the gradient too, written over them: one buffer, not two. Everything
/// after the maximum is computed on `z − max`, so logits of ±1e4 lose nothing to
/// cancellation.
#[inline(always)]
fn row_in_place(
    z: &mut [f32],
    bias: &[f32],
    target: usize,
    eps: f32,
    gradient: bool,
) -> (f32, bool) {
    let max = match bias.is_empty() {
        true => lane_max(z),
        false => add_and_max(z, bias),
    };
    let (shifted_target, correct) = (z[target] - max, is_first_max(z, max, target));
    if !gradient {
        return row_loss(exp_sums(z, max), shifted_target, z.len(), eps, correct);
    }
    let sums = exp_in_place(z, max);
    let (inv, uniform) = (1.0 / sums.0, eps / z.len() as f32);
    z.iter_mut().for_each(|x| *x = *x * inv - uniform);
    z[target] -= 1.0 - eps;
    row_loss(sums, shifted_target, z.len(), eps, correct)
}

/// `(nll, correct)` of a row from its sums `(Σ exp(z − max), Σ (z − max))`, its true
/// token's `z_t − max` and its length.
#[inline(always)]
fn row_loss(
    sums: (f32, f32),
    shifted_target: f32,
    len: usize,
    eps: f32,
    correct: bool,
) -> (f32, bool) {
    // -log p_t = log Σ exp(z - max) - (z_t - max); the uniform part uses mean_j (z_j - max).
    let log_sum_exp = sums.0.ln();
    let nll = log_sum_exp - shifted_target;
    // Without smoothing the uniform part is left out, not multiplied by 0: a -inf logit
    // makes it infinite, and 0 · inf would turn a finite (or +inf) loss into NaN.
    if eps == 0.0 {
        return (nll, correct);
    }
    let uniform = log_sum_exp - sums.1 / len as f32;
    ((1.0 - eps) * nll + eps * uniform, correct)
}

/// Whether `target` is the first position holding `max` (the arg-max, ties to the first):
/// `z_target = max` and no earlier entry equals it, compared a lane block at a time.
#[inline(always)]
fn is_first_max(z: &[f32], max: f32, target: usize) -> bool {
    let before = &z[..target];
    z[target] == max
        && !before
            .chunks(LANES)
            .any(|block| block.iter().fold(false, |seen, &x| seen | (x == max)))
}

/// `z ← z + bias` (same length), returning `max_j z_j` lane-wise as [`lane_max`] does.
#[inline(always)]
fn add_and_max(z: &mut [f32], bias: &[f32]) -> f32 {
    let mut max = [f32::NEG_INFINITY; LANES];
    let done = z.len() / LANES * LANES;
    for (z, b) in z.chunks_exact_mut(LANES).zip(bias.chunks_exact(LANES)) {
        for j in 0..LANES {
            z[j] += b[j];
            max[j] = if z[j] > max[j] { z[j] } else { max[j] };
        }
    }
    let mut max = max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for (z, &b) in z[done..].iter_mut().zip(&bias[done..]) {
        *z += b;
        max = max.max(*z);
    }
    max
}

/// `max_j z_j`, lane-wise.
#[inline(always)]
fn lane_max(z: &[f32]) -> f32 {
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

/// `(Σ exp(z − max), Σ (z − max))`.
#[inline(always)]
fn exp_sums(z: &[f32], max: f32) -> (f32, f32) {
    let (mut sum_exp, mut sum_shifted) = ([0f32; LANES], [0f32; LANES]);
    let done = z.len() / LANES * LANES;
    for x in z.chunks_exact(LANES) {
        for j in 0..LANES {
            sum_exp[j] += exp(x[j] - max);
            sum_shifted[j] += x[j] - max;
        }
    }
    let tail = z[done..].iter().map(|&x| (exp(x - max), x - max));
    tail.fold(
        (sum_exp.iter().sum(), sum_shifted.iter().sum()),
        |(e, s), (v, x)| (e + v, s + x),
    )
}

/// [`exp_sums`], with `exp(z − max)` written over `z` (the same sums, in the same order).
#[inline(always)]
fn exp_in_place(z: &mut [f32], max: f32) -> (f32, f32) {
    let (mut sum_exp, mut sum_shifted) = ([0f32; LANES], [0f32; LANES]);
    let done = z.len() / LANES * LANES;
    for x in z.chunks_exact_mut(LANES) {
        for j in 0..LANES {
            let shifted = x[j] - max;
            x[j] = exp(shifted);
            sum_exp[j] += x[j];
            sum_shifted[j] += shifted;
        }
    }
    let (mut e, mut s): (f32, f32) = (sum_exp.iter().sum(), sum_shifted.iter().sum());
    for x in &mut z[done..] {
        let shifted = *x - max;
        *x = exp(shifted);
        e += *x;
        s += shifted;
    }
    (e, s)
}

/// `erf(x)` to within 4e-7 (Eigen's rational approximation on [-4, 4], where `erf` reaches
/// ±1 in `f32`); NaN stays NaN.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = if x < -4.0 { -4.0 } else { x };
    let x = if x > 4.0 { 4.0 } else { x };
    let x2 = x * x;
    let p = ((((((-2.726_142_3e-10 * x2 + 2.770_681_4e-8) * x2 - 2.101_024e-6) * x2
        - 5.692_506_4e-5)
        * x2
        - 7.349_906_3e-4)
        * x2
        - 2.954_600_1e-3)
        * x2
        - 1.609_603_3e-2)
        * x;
    let q = (((-1.456_607_2e-5 * x2 - 2.133_740_6e-4) * x2 - 1.682_827e-3) * x2 - 7.373_329_2e-3)
        * x2
        - 1.426_474e-2;
    p / q
}

/// `Φ(x) = (1 + erf(x/√2)) / 2`, the standard normal CDF.
#[inline(always)]
fn normal_cdf(x: f32) -> f32 {
    0.5 * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `y = u Φ(u)` elementwise (GELU, Hendrycks & Gimpel 2016, in BERT's erf form) of
/// `u = x + bias`, `bias` added to each row of `bias.len()` values (empty: `u = x`), and
/// GELU's derivative `Φ(u) + u φ(u)` into `slope` when given: all its backward needs, so
/// that `u` is never stored. Both are written whole, never read: fresh memory needs no
/// zeroing.
#[inline(always)]
fn gelu_slice(
    x: &[f32],
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
    slope: Option<&mut [MaybeUninit<f32>]>,
) {
    let d = if bias.is_empty() { x.len() } else { bias.len() };
    if d == 0 {
        return;
    }
    let mut slopes = slope.map(|slope| slope.chunks_mut(d));
    for (x, y) in x.chunks(d).zip(y.chunks_mut(d)) {
        let slope = slopes.as_mut().and_then(Iterator::next);
        match bias.is_empty() {
            true => gelu_row::<false>(x, bias, y, slope),
            false => gelu_row::<true>(x, bias, y, slope),
        }
    }
}

/// [`gelu_slice`] of one row, `u = x + bias` (`BIAS`) or `u = x`. Plain `for` loops by
/// position over slices cut to one length: the compiler vectorises them (a chain of
/// iterator adapters, or a `for_each` over a range, around the `erf` and `exp` was left as a
/// scalar call).
#[inline(always)]
fn gelu_row<const BIAS: bool>(
    x: &[f32],
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
    slope: Option<&mut [MaybeUninit<f32>]>,
) {
    const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;
    let n = y.len();
    let (x, bias) = (&x[..n], &bias[..if BIAS { n } else { 0 }]);
    let u = |i: usize| if BIAS { x[i] + bias[i] } else { x[i] };
    match slope {
        Some(slope) => {
            let slope = &mut slope[..n];
            for i in 0..n {
                let u = u(i);
                let phi = normal_cdf(u);
                y[i].write(u * phi);
                slope[i].write(phi + u * FRAC_1_SQRT_2PI * exp(-0.5 * u * u));
            }
        }
        None => {
            for (i, y) in y.iter_mut().enumerate() {
                let u = u(i);
                y.write(u * normal_cdf(u));
            }
        }
    }
}

/// `dst ← dst · src` (same length).
#[inline(always)]
fn mul_slice(dst: &mut [f32], src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d *= s);
}

/// `dst ← dst + src` (same length).
#[inline(always)]
fn add_slice(dst: &mut [f32], src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d += s);
}

/// `dst ← (a + b) + c` (same lengths).
#[inline(always)]
fn sum_slice(dst: &mut [f32], a: &[f32], b: &[f32], c: &[f32]) {
    for (((d, &a), &b), &c) in dst.iter_mut().zip(a).zip(b).zip(c) {
        *d = (a + b) + c;
    }
}

/// `dst ← dst + Σ_rows row` over the rows of `dst.len()` values in `rows`, one row after
/// another.
#[inline(always)]
fn add_rows_slice(dst: &mut [f32], rows: &[f32]) {
    for row in rows.chunks_exact(dst.len().max(1)) {
        add_slice(dst, row);
    }
}

/// `Σ x`, lane-wise.
#[inline(always)]
fn lane_sum(x: &[f32]) -> f32 {
    let mut sum = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..LANES {
            sum[j] += chunk[j];
        }
    }
    sum.iter().chain(tail).sum()
}

/// `Σ a_j b_j` (same length), lane-wise.
#[inline(always)]
fn lane_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut dot = [0f32; LANES];
    let done = a.len() / LANES * LANES;
    for (a, b) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for j in 0..LANES {
            dot[j] += a[j] * b[j];
        }
    }
    let tail: f32 = a[done..].iter().zip(&b[done..]).map(|(a, b)| a * b).sum();
    dot.iter().sum::<f32>() + tail
}

/// `scores ← softmax(scores + bias)` (same length). A score below `max − 87` gets exactly 0,
/// so a key hidden by a `-1e9` bias has no weight at all.
#[inline(always)]
fn softmax_slice(scores: &mut [f32], bias: &[f32]) {
    scores.iter_mut().zip(bias).for_each(|(s, &b)| *s += b);
    let max = lane_max(scores);
    scores.iter_mut().for_each(|s| {
        let x = *s - max;
        *s = if x < -87.0 { 0.0 } else { exp(x) };
    });
    let inv = 1.0 / lane_sum(scores);
    scores.iter_mut().for_each(|s| *s *= inv);
}

/// `d ← p ⊙ (d − Σ_j d_j p_j)`: the gradient through a softmax row `p` of the incoming
/// gradient `d` of its output.
#[inline(always)]
fn softmax_backward_slice(p: &[f32], d: &mut [f32]) {
    let dot = lane_dot(p, d);
    d.iter_mut().zip(p).for_each(|(d, &p)| *d = p * (*d - dot));
}

/// One row of LayerNorm: `y = x̂ γ + β` with `x̂ = (x − μ) r`, `r = 1/√(σ² + ε)` (`σ²` the
/// biased variance, computed from `x − μ`, not as `E[x²] − μ²`); writes `x̂` too (both
/// whole, never read) and returns `r`.
#[inline(always)]
fn layer_norm_slice(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    y: &mut [MaybeUninit<f32>],
    x_hat: &mut [MaybeUninit<f32>],
) -> f32 {
    let n = x.len() as f32;
    let mean = lane_sum(x) / n;
    let mut squares = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum();
    for chunk in chunks {
        for j in 0..LANES {
            squares[j] += (chunk[j] - mean) * (chunk[j] - mean);
        }
    }
    let variance = (squares.iter().sum::<f32>() + tail) / n;
    let r = 1.0 / (variance + eps).sqrt();
    let outputs = y.iter_mut().zip(x_hat.iter_mut());
    for (((y, c), &x), (&g, &b)) in outputs.zip(x).zip(gamma.iter().zip(beta)) {
        let c = c.write((x - mean) * r);
        y.write(*c * g + b);
    }
    r
}

/// One row of LayerNorm's backward, from the incoming gradient `dy`, the row's `x̂` and `r`:
/// `dx = r (g − mean(g) − x̂ mean(g ⊙ x̂))` with `g = dy ⊙ γ` (`dx` written whole before it
/// is read); adds `dy ⊙ x̂` to `d_gamma` and `dy` to `d_beta`.
#[inline(always)]
fn layer_norm_backward_slice(
    dy: &[f32],
    x_hat: &[f32],
    r: f32,
    gamma: &[f32],
    dx: &mut [MaybeUninit<f32>],
    d_gamma: &mut [f32],
    d_beta: &mut [f32],
) {
    let n = dy.len();
    let (x_hat, gamma, dx) = (&x_hat[..n], &gamma[..n], &mut dx[..n]);
    let (d_gamma, d_beta) = (&mut d_gamma[..n], &mut d_beta[..n]);
    for i in 0..n {
        dx[i].write(dy[i] * gamma[i]);
        d_gamma[i] += dy[i] * x_hat[i];
        d_beta[i] += dy[i];
    }
    // SAFETY: the loop above wrote every value of `dx`.
    let dx = unsafe { dx.assume_init_mut() };
    let n = n as f32;
    let mean_g = lane_sum(dx) / n;
    let mean_gx = lane_dot(dx, x_hat) / n;
    dx.iter_mut()
        .zip(x_hat)
        .for_each(|(g, &c)| *g = r * (*g - mean_g - c * mean_gx));
}

/// The instruction sets a kernel can be compiled for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum Tier {
    /// Plain code: SSE2 on x86-64.
    #[cfg_attr(not(test), allow(dead_code))] // only a test narrows the kernels to it
    Plain,
    /// AVX2 + FMA, 8 `f32` lanes.
    Avx2,
    /// AVX-512 F + VL, 16 `f32` lanes.
    Avx512,
}

#[cfg(test)]
thread_local! {
    /// The widest tier this thread's kernel calls may take (tests narrow it to compare them).
    pub(crate) static WIDEST: std::cell::Cell<Tier> = const { std::cell::Cell::new(Tier::Avx512) };
}

/// The widest tier a kernel call may take: every one the CPU has, outside tests.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn widest() -> Tier {
    #[cfg(test)]
    return WIDEST.with(|w| w.get());
    #[cfg(not(test))]
    Tier::Avx512
}

/// Defines `$name`, which runs `$inner` compiled for AVX-512 (F and VL, 16 `f32` lanes) or
/// for AVX2 and FMA (8 lanes), the widest the CPU has, and as plain code elsewhere. The tiers
/// give the same bits: the kernels keep 16 lane accumulators whatever the width, and nothing
/// contracts a multiply and an add into an FMA.
macro_rules! multiversion {
    ($(#[$doc:meta])* pub(crate) fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $inner:ident;) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) -> $ret {
                    $inner($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $inner($($arg),*)
                }
                let widest = widest();
                if widest >= Tier::Avx512
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: both features were just detected (AVX-512F implies AVX2, FMA).
                    return unsafe { avx512($($arg),*) };
                }
                if widest >= Tier::Avx2
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: both features were just detected.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $inner($($arg),*)
        }
    };
}

multiversion! {
    /// One row of the fused cross-entropy ([`row`]).
    pub(crate) fn cross_entropy_row(
        z: &[f32], target: usize, eps: f32, gradient: Option<&mut [f32]>
    ) -> (f32, bool) = row;
}

multiversion! {
    /// One row of the fused cross-entropy of `z + bias`, the logits and then the gradient
    /// (when `gradient`) written over `z` ([`row_in_place`]).
    pub(crate) fn cross_entropy_row_in_place(
        z: &mut [f32], bias: &[f32], target: usize, eps: f32, gradient: bool
    ) -> (f32, bool) = row_in_place;
}

multiversion! {
    /// `dst ← dst + src` ([`add_slice`]).
    pub(crate) fn add_assign(dst: &mut [f32], src: &[f32]) -> () = add_slice;
}

multiversion! {
    /// `dst ← (a + b) + c` ([`sum_slice`]).
    pub(crate) fn sum(dst: &mut [f32], a: &[f32], b: &[f32], c: &[f32]) -> () = sum_slice;
}

multiversion! {
    /// `dst ← dst + Σ_rows row`, rows of `dst.len()` values ([`add_rows_slice`]).
    pub(crate) fn add_rows(dst: &mut [f32], rows: &[f32]) -> () = add_rows_slice;
}

multiversion! {
    /// GELU of `x + bias` into `y`, and its derivative into `slope` if given
    /// ([`gelu_slice`]).
    pub(crate) fn gelu(
        x: &[f32], bias: &[f32], y: &mut [MaybeUninit<f32>], slope: Option<&mut [MaybeUninit<f32>]>
    ) -> () = gelu_slice;
}

multiversion! {
    /// GELU's backward, `grad ← grad · GELU'(u)`, from the derivative [`gelu`] kept
    /// ([`mul_slice`]).
    pub(crate) fn gelu_backward(grad: &mut [f32], slope: &[f32]) -> () = mul_slice;
}

multiversion! {
    /// `scores ← softmax(scores + bias)` ([`softmax_slice`]).
    pub(crate) fn softmax(scores: &mut [f32], bias: &[f32]) -> () = softmax_slice;
}

multiversion! {
    /// `d ← p ⊙ (d − ⟨d, p⟩)`, the softmax's backward ([`softmax_backward_slice`]).
    pub(crate) fn softmax_backward(p: &[f32], d: &mut [f32]) -> () = softmax_backward_slice;
}

multiversion! {
    /// One row of LayerNorm ([`layer_norm_slice`]); returns `1/√(σ² + ε)`.
    pub(crate) fn layer_norm(
        x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, y: &mut [MaybeUninit<f32>],
        x_hat: &mut [MaybeUninit<f32>]
    ) -> f32 = layer_norm_slice;
}

multiversion! {
    /// One row of LayerNorm's backward ([`layer_norm_backward_slice`]).
    pub(crate) fn layer_norm_backward(
        dy: &[f32], x_hat: &[f32], r: f32, gamma: &[f32], dx: &mut [MaybeUninit<f32>],
        d_gamma: &mut [f32], d_beta: &mut [f32]
    ) -> () = layer_norm_backward_slice;
}
