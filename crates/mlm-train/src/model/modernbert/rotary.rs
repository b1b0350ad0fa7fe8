//! Rotary position embeddings (Su et al. 2021, RoFormer §3.4) as transformers' ModernBERT
//! computes them.

use burn::tensor::{Device, Tensor, TensorData};

/// The rotation of positions `0..seq` at one base: `x·cos + rotate_half(x)·sin` per head,
/// where feature `i` and `i + d_head/2` turn together at frequency `θ^(-2i/d_head)`
/// (transformers' `rotate_half` layout, not interleaved pairs).
pub struct Rotary {
    /// `[1, seq, 1, d_head]`.
    cos: Tensor<4>,
    /// `[1, seq, 1, d_head]`.
    sin: Tensor<4>,
}

impl Rotary {
    /// The tables of `seq` positions for heads of width `head_dim` (even) at base `theta`,
    /// computed in `f32` as transformers does (`inv_freq = 1 / θ^(2i/d)`, then
    /// `cos(p · inv_freq)`), so that the rotation matches its to rounding.
    pub fn new(seq: usize, head_dim: usize, theta: f64, device: &Device) -> Self {
        let half = head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / head_dim as f32))
            .collect();
        let angles: Vec<f32> = (0..seq)
            .flat_map(|p| {
                let row: Vec<f32> = inv_freq.iter().map(|f| p as f32 * f).collect();
                [row.clone(), row].concat()
            })
            .collect();
        let table = |f: fn(f32) -> f32| {
            let values: Vec<f32> = angles.iter().map(|&a| f(a)).collect();
            Tensor::from_data(TensorData::new(values, [1, seq, 1, head_dim]), device)
        };
        Self {
            cos: table(f32::cos),
            sin: table(f32::sin),
        }
    }

    /// `x [batch, seq, d_model]`, `heads` heads side by side → rotated, same shape.
    pub fn apply(&self, x: Tensor<3>, heads: usize) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let head_dim = d_model / heads;
        let half = head_dim / 2;
        let x = x.reshape([batch, seq, heads, head_dim]);
        let first = x.clone().narrow(3, 0, half);
        let second = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![second.neg(), first], 3);
        (x * self.cos.clone() + rotated * self.sin.clone()).reshape([batch, seq, d_model])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_norms_and_turns_by_relative_position() {
        // One head of width 4 at positions 0..3: rotations keep each pair's length, and the
        // dot product of two rotated vectors depends only on their distance.
        let device = Device::flex();
        let rotary = Rotary::new(3, 4, 10_000.0, &device);
        let x = Tensor::<3>::from_data(
            TensorData::new([1.0f32, 2.0, 3.0, 4.0].repeat(3), [1, 3, 4]),
            &device,
        );
        let y: Vec<f32> = rotary
            .apply(x, 1)
            .into_data()
            .try_into_vec::<f32>()
            .unwrap();
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        for p in 0..3 {
            assert!((norm(&y[4 * p..4 * p + 4]) - 30.0).abs() < 1e-4);
        }
        assert_eq!(&y[..4], &[1.0, 2.0, 3.0, 4.0], "position 0 is not turned");
        // Pair (0, 2) at frequency 1 turns by one radian per position.
        let (c, s) = (1f32.cos(), 1f32.sin());
        assert!((y[4] - (1.0 * c - 3.0 * s)).abs() < 1e-6);
        assert!((y[6] - (3.0 * c + 1.0 * s)).abs() < 1e-6);
    }
}
