//! The decoder and the cross-entropy over chunks of rows, on contiguous `f32` data: the
//! logits of one chunk exist at a time, never the whole `[n, vocab]`.
//!
//! Per chunk of `c` rows: `z = b + h_c Wᵀ` (one product onto the bias rows), each row's
//! `-log p(true token)` and its gradient `g = softmax − onehot` in one sweep (the fused row
//! kernel, [`cpu::cross_entropy_row`], over the logits in place), then `dh_c = g W`,
//! `dW += gᵀ h_c` (a product accumulating in place) and `db += Σ_rows g`. The gradients are made in the forward, as
//! Liger-Kernel's fused linear cross-entropy does (Hsu et al. 2024, §3.2): the backward
//! then only scales them, and no logit is computed twice.

use rayon::prelude::*;

use super::cpu;
use super::product::{Matrix, product};

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
    let mut z = Vec::with_capacity(rows * vocab);
    let mut gradients =
        wants_gradients.then(|| [vec![0f32; n * d], vec![0f32; w.len()], vec![0f32; vocab]]);
    let (mut loss_sum, mut n_correct) = (0f64, 0usize);
    for (chunk, targets) in targets.chunks(rows).enumerate() {
        let c = targets.len();
        let h_c = &h[chunk * rows * d..][..c * d];
        // Logits of the chunk: the bias rows (written, never zeroed first), plus h_c Wᵀ.
        z.clear();
        (0..c).for_each(|_| z.extend_from_slice(b));
        product(&mut z, Matrix::new(h_c, d), Matrix::new(w, d).t(), true);
        // -log p(true token) per row, and its gradient in the same sweep, written over the
        // row's logits: one chunk buffer, not two.
        let rows_and_targets = z.par_chunks_mut(vocab).zip(targets.par_iter());
        let per_row: Vec<(f32, bool)> = match gradients.is_some() {
            true => rows_and_targets
                .map(|(z, &t)| cpu::cross_entropy_row_in_place(z, t as usize, eps))
                .collect(),
            false => rows_and_targets
                .map(|(z, &t)| cpu::cross_entropy_row(z, t as usize, eps, None))
                .collect(),
        };
        // Summed in row order: the same loss on every run, whatever the threads did.
        loss_sum += per_row.iter().map(|&(nll, _)| f64::from(nll)).sum::<f64>();
        n_correct += per_row.iter().filter(|&&(_, correct)| correct).count();
        if let Some([dh, dw, db]) = &mut gradients {
            let g = &z[..];
            // dh_c = g W; dW += gᵀ h_c; db += Σ_rows g.
            product(
                &mut dh[chunk * rows * d..][..c * d],
                Matrix::new(g, vocab),
                Matrix::new(w, d),
                false,
            );
            // The first chunk writes dW, the others add to it.
            product(
                dw,
                Matrix::new(g, vocab).t(),
                Matrix::new(h_c, d),
                chunk > 0,
            );
            db.par_chunks_mut(CHUNK).enumerate().for_each(|(i, db)| {
                for row in g.chunks(vocab) {
                    let row = &row[i * CHUNK..][..db.len()];
                    db.iter_mut().zip(row).for_each(|(db, g)| *db += g);
                }
            });
        }
    }
    Sweep {
        loss_sum,
        n_correct,
        gradients,
    }
}

/// Bias entries per parallel task.
const CHUNK: usize = 4096;

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
        let (n, d, vocab) = (7, 5, 11);
        let value = |i: usize, scale: f32| ((i * 37 % 23) as f32 - 11.0) * scale;
        let h: Vec<f32> = (0..n * d).map(|i| value(i, 0.1)).collect();
        let w: Vec<f32> = (0..vocab * d).map(|i| value(i + 3, 0.07)).collect();
        let b: Vec<f32> = (0..vocab).map(|i| value(i + 5, 0.05)).collect();
        let targets: Vec<i64> = (0..n as i64).map(|i| i * 3 % vocab as i64).collect();
        let (loss, want) = dense(&h, &w, &b, &targets);
        for rows in [1, 2, 3, 7, 100] {
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
