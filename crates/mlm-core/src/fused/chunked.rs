//! The decoder and the cross-entropy over chunks of rows, on contiguous `f32` data: the
//! logits of one chunk exist at a time, never the whole `[n, vocab]`.
//!
//! Per chunk of `c` rows: `h_c Wᵀ` (one product), then per row `z = b + h_c Wᵀ`, its
//! `-log p(true token)` and its gradient `g = softmax − onehot` in one sweep (the fused row
//! kernel, [`cpu::cross_entropy_row_in_place`], over the row in place) and `db += g` while
//! the row is in cache; then `dh_c = g W` and `dW += gᵀ h_c` (a product accumulating in
//! place). The gradients are made in the forward, as
//! Liger-Kernel's fused linear cross-entropy does (Hsu et al. 2024, §3.2): the backward
//! then only scales them, and no logit is computed twice.

use rayon::prelude::*;

use super::cpu;
use super::product::{Matrix, product, product_extend};

/// The loss of a sweep, and the gradients of its summed loss when asked for.
pub(super) struct Sweep {
    /// `Σ_rows -log p(true token)` (label-smoothed), summed in row order.
    pub(super) loss_sum: f64,
    /// Rows whose arg-max logit is the target.
    pub(super) n_correct: usize,
    /// `∂ loss_sum / ∂ (hidden, weight, bias)`: `[n, d]`, `[vocab, d]`, `[vocab]`.
    pub(super) gradients: Option<[Vec<f32>; 3]>,
}

/// The summed cross-entropy of `z = h Wᵀ + b` against `targets`, `chunk_rows` rows at a
/// time; `h` `[n, d]`, `w` `[vocab, d]`, `b` `[vocab]`, `targets` `[n]` in `0..vocab`.
pub(super) fn sweep(
    [h, w, b]: [&[f32]; 3],
    targets: &[i64],
    eps: f32,
    chunk_rows: usize,
    wants_gradients: bool,
) -> Sweep {
    let (vocab, n) = (b.len(), targets.len());
    let d = w.len() / vocab;
    let rows = chunk_rows.clamp(1, n.max(1));
    // Every buffer is written by gemm or a sweep before it is read: none is zeroed first.
    let mut z = Vec::with_capacity(rows * vocab);
    let mut gradients = wants_gradients.then(|| [n * d, w.len(), vocab].map(Vec::with_capacity));
    let (mut loss_sum, mut n_correct) = (0f64, 0usize);
    for (chunk, targets) in targets.chunks(rows).enumerate() {
        let h_c = &h[chunk * rows * d..][..targets.len() * d];
        // h_c Wᵀ; the row kernel adds the bias as it reads each row for its maximum.
        z.clear();
        product_extend(&mut z, Matrix::new(h_c, d), Matrix::new(w, d).t());
        let blocks = rows_in_blocks(&mut z, b, targets, eps, gradients.is_some());
        // Summed in row order: the same loss on every run, whatever the threads did.
        let per_row = blocks.iter().flat_map(|block| &block.per_row);
        loss_sum += per_row.clone().map(|&(nll, _)| f64::from(nll)).sum::<f64>();
        n_correct += per_row.filter(|&&(_, correct)| correct).count();
        if let Some([dh, dw, db]) = &mut gradients {
            let g = Matrix::new(&z, vocab);
            // dh_c = g W; dW (+)= gᵀ h_c, written by the first chunk; db += Σ_blocks.
            product_extend(dh, g, Matrix::new(w, d));
            match chunk {
                0 => product_extend(dw, g.t(), Matrix::new(h_c, d)),
                _ => product(dw, g.t(), Matrix::new(h_c, d), true),
            }
            for block_sum in blocks.into_iter().filter_map(|block| block.bias_grad) {
                match db.is_empty() {
                    true => *db = block_sum,
                    false => cpu::add_assign(db, &block_sum),
                }
            }
        }
    }
    if let Some([_, dw, db]) = &mut gradients {
        // No rows at all: zero gradients, as the loss is 0.
        dw.resize(w.len(), 0.0);
        db.resize(vocab, 0.0);
    }
    Sweep {
        loss_sum,
        n_correct,
        gradients,
    }
}

/// Rows per task of the row kernel. Fixed, so the bias gradient sums its rows in the same
/// order (rows within a block, then blocks) on any number of threads.
const BLOCK_ROWS: usize = 16;

/// One block of rows after the row kernel: each row's `(nll, correct)`, and with gradients
/// the block's sum of them, `[vocab]`.
struct Block {
    per_row: Vec<(f32, bool)>,
    bias_grad: Option<Vec<f32>>,
}

/// The row kernel over `z` `[rows, vocab]` plus the bias, in blocks of [`BLOCK_ROWS`]: each
/// row's logits and then (with `gradient`) its gradient written over it, and the gradient
/// summed over the block while its rows are still in cache.
fn rows_in_blocks(
    z: &mut [f32],
    bias: &[f32],
    targets: &[i64],
    eps: f32,
    gradient: bool,
) -> Vec<Block> {
    let vocab = bias.len();
    let blocks = z.par_chunks_mut(BLOCK_ROWS * vocab);
    blocks
        .zip(targets.par_chunks(BLOCK_ROWS))
        .map(|(z, targets)| {
            let mut bias_grad: Option<Vec<f32>> = None;
            let per_row = z.chunks_mut(vocab).zip(targets);
            let per_row = per_row.map(|(z, &t)| {
                let row = cpu::cross_entropy_row_in_place(z, bias, t as usize, eps, gradient);
                match (&mut bias_grad, gradient) {
                    (_, false) => {}
                    (None, true) => bias_grad = Some(z.to_vec()),
                    (Some(sum), true) => cpu::add_assign(sum, z),
                }
                row
            });
            let per_row = per_row.collect();
            Block { per_row, bias_grad }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense reference in f64: loss, and the gradients of the summed loss.
    fn dense(h: &[f32], w: &[f32], b: &[f32], targets: &[i64]) -> (f64, [Vec<f64>; 3]) {
        let (vocab, d) = (b.len(), h.len() / targets.len());
        let (mut loss, mut dh, mut dw, mut db) = (
            0.0,
            vec![0.0; h.len()],
            vec![0.0; w.len()],
            vec![0.0; vocab],
        );
        for (i, &t) in targets.iter().enumerate() {
            let h = &h[i * d..][..d];
            let z: Vec<f64> = (0..vocab)
                .map(|v| {
                    f64::from(b[v]) + (0..d).map(|k| f64::from(h[k] * w[v * d + k])).sum::<f64>()
                })
                .collect();
            let max = z.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = z.iter().map(|z| (z - max).exp()).sum();
            loss += max + sum.ln() - z[t as usize];
            for v in 0..vocab {
                let g = (z[v] - max).exp() / sum - f64::from(u8::from(v == t as usize));
                db[v] += g;
                for k in 0..d {
                    dh[i * d + k] += g * f64::from(w[v * d + k]);
                    dw[v * d + k] += g * f64::from(h[k]);
                }
            }
        }
        (loss, [dh, dw, db])
    }

    #[test]
    fn every_chunk_size_gives_the_dense_loss_and_gradients() {
        // 40 rows: three blocks of the row kernel (16, 16, 8), so the bias gradient sums
        // blocks as well as rows.
        let (n, d, vocab) = (40, 5, 11);
        let value = |i: usize, scale: f32| ((i * 37 % 23) as f32 - 11.0) * scale;
        let h: Vec<f32> = (0..n * d).map(|i| value(i, 0.1)).collect();
        let w: Vec<f32> = (0..vocab * d).map(|i| value(i + 3, 0.07)).collect();
        let b: Vec<f32> = (0..vocab).map(|i| value(i + 5, 0.05)).collect();
        let targets: Vec<i64> = (0..n as i64).map(|i| i * 3 % vocab as i64).collect();
        let (loss, want) = dense(&h, &w, &b, &targets);
        for rows in [1, 2, 3, 7, 17, 40, 100] {
            let got = sweep([&h, &w, &b], &targets, 0.0, rows, true);
            assert!(
                (got.loss_sum - loss).abs() < 1e-5 * loss,
                "{rows} rows: {} vs {loss}",
                got.loss_sum
            );
            for (got, want) in got.gradients.unwrap().iter().zip(&want) {
                let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (f64::from(*g) - w).abs() < 1e-5 * scale,
                        "{rows} rows: {g} vs {w}"
                    );
                }
            }
        }
    }
}
