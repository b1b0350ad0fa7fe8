//! The masked positions of a batch and their true tokens, checked on the host before they
//! become tensors.
//!
//! The head's gather ([`MlmHead::forward_targets`](crate::MlmHead::forward_targets)) and the
//! loss ([`MaskedCrossEntropy::forward_targets`](crate::MaskedCrossEntropy::forward_targets))
//! must never index out of range, and a tensor can only be checked by reading it back: on a
//! GPU, a stall of the whole queue. A [`MaskedTargets`] is checked once, while its numbers
//! are still on the host (where the masker made them), so the training step reads nothing
//! back from the device.

use burn::tensor::Device;
use burn::tensor::{Int, Tensor, TensorData};

use crate::MlmError;

/// Masked positions and their true tokens, as tensors whose every entry is known to be in
/// range.
///
/// Built by [`MaskedBatch::targets`] from a masked batch, or by [`MaskedTargets::new`] from
/// host data.
///
/// [`MaskedBatch::targets`]: crate::MaskedBatch::targets
#[derive(Debug, Clone)]
pub struct MaskedTargets {
    positions: Tensor<1, Int>,
    targets: Tensor<1, Int>,
    batch_and_seq: [usize; 2],
    vocab_size: usize,
}

impl MaskedTargets {
    /// Checks `positions` (flat indices `b * seq + s` into the `batch * seq` rows of hidden
    /// states `[batch, seq, d_model]`, `batch_and_seq = [batch, seq]`) and `targets` (true
    /// token ids in `[0, vocab_size)`) on the host, then uploads them to `device`. Either may
    /// be empty (nothing masked). The head's [`forward_targets`] then takes hidden states of
    /// exactly that `[batch, seq]`, so a swapped batch and sequence length is refused, not
    /// graded at the wrong rows.
    ///
    /// [`forward_targets`]: crate::MlmHead::forward_targets
    ///
    /// # Shapes
    /// - positions, targets: `[n_masked]`, `targets[i]` the true token at `positions[i]`
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if the two lengths differ; [`MlmError::PositionOutOfRange`]
    /// for a position outside `[0, n_rows)`; [`MlmError::DuplicatePosition`] for a position
    /// listed twice; [`MlmError::TargetOutOfRange`] for a target outside `[0, vocab_size)`
    /// (`-100` included: every target here is graded), naming its flat position.
    pub fn new(
        positions: &[i64],
        targets: &[i64],
        batch_and_seq: [usize; 2],
        vocab_size: usize,
        device: &Device,
    ) -> Result<Self, MlmError> {
        let n_rows = batch_and_seq[0] * batch_and_seq[1];
        if positions.len() != targets.len() {
            return Err(MlmError::ShapeMismatch {
                what: "targets (one per masked position)",
                expected: format!("[n_masked = {}], the length of positions", positions.len()),
                actual: vec![targets.len()],
            });
        }
        check_positions(positions, n_rows)?;
        check_distinct(positions, n_rows)?;
        if let Some((&position, &target)) = positions
            .iter()
            .zip(targets)
            .find(|&(_, &t)| t < 0 || t as u64 >= vocab_size as u64)
        {
            return Err(MlmError::TargetOutOfRange {
                position,
                target,
                vocab_size,
            });
        }
        let upload = |values: &[i64]| {
            Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
        };
        Ok(Self {
            positions: upload(positions),
            targets: upload(targets),
            batch_and_seq,
            vocab_size,
        })
    }

    /// The flat positions `b * seq + s`, `[n_masked]`, each in `[0, n_rows)`.
    pub fn positions(&self) -> &Tensor<1, Int> {
        &self.positions
    }

    /// The true token at each position, `[n_masked]`, each in `[0, vocab_size)`.
    pub fn targets(&self) -> &Tensor<1, Int> {
        &self.targets
    }

    /// Number of masked positions, `n_masked`.
    pub fn len(&self) -> usize {
        self.positions.dims()[0]
    }

    /// Whether nothing is masked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `[batch, seq]` of the hidden states the positions index into.
    pub fn batch_and_seq(&self) -> [usize; 2] {
        self.batch_and_seq
    }

    /// Number of rows the positions index into, `batch * seq`.
    pub fn n_rows(&self) -> usize {
        self.batch_and_seq[0] * self.batch_and_seq[1]
    }

    /// The vocabulary the targets were checked against.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

/// Checks that every flat position is a row of the `n_rows = batch * seq` hidden states.
///
/// # Errors
/// [`MlmError::PositionOutOfRange`] naming the first that is not.
pub(crate) fn check_positions(positions: &[i64], n_rows: usize) -> Result<(), MlmError> {
    match positions
        .iter()
        .find(|&&p| p < 0 || p as u64 >= n_rows as u64)
    {
        Some(&position) => Err(MlmError::PositionOutOfRange { position, n_rows }),
        None => Ok(()),
    }
}

/// Checks that no flat position is listed twice (each is a row `< n_rows`, already checked).
///
/// # Errors
/// [`MlmError::DuplicatePosition`] naming the first repeat.
fn check_distinct(positions: &[i64], n_rows: usize) -> Result<(), MlmError> {
    let mut seen = vec![false; n_rows];
    for &position in positions {
        if std::mem::replace(&mut seen[position as usize], true) {
            return Err(MlmError::DuplicatePosition { position });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type T = MaskedTargets;

    #[test]
    fn each_out_of_range_entry_is_refused_by_name() {
        let device = Device::flex();
        assert_eq!(
            T::new(&[0, 6], &[1, 2], [2, 3], 10, &device).unwrap_err(),
            MlmError::PositionOutOfRange {
                position: 6,
                n_rows: 6
            }
        );
        assert_eq!(
            T::new(&[-1], &[1], [2, 3], 10, &device).unwrap_err(),
            MlmError::PositionOutOfRange {
                position: -1,
                n_rows: 6
            }
        );
        assert_eq!(
            T::new(&[0, 5], &[9, 10], [2, 3], 10, &device).unwrap_err(),
            MlmError::TargetOutOfRange {
                position: 5,
                target: 10,
                vocab_size: 10
            }
        );
        let ignore_index = T::new(&[0, 1], &[3, -100], [2, 3], 10, &device).unwrap_err();
        assert_eq!(
            ignore_index.to_string(),
            "masked target -100 at flat position 1 is not a token id in [0, 10): targets are graded \
             positions only (the ignore index -100 belongs in HF-style labels)"
        );
        assert_eq!(
            T::new(&[3, 4, 3], &[1, 2, 3], [2, 3], 10, &device).unwrap_err(),
            MlmError::DuplicatePosition { position: 3 }
        );
        assert!(matches!(
            T::new(&[0, 5], &[9], [2, 3], 10, &device).unwrap_err(),
            MlmError::ShapeMismatch { .. }
        ));
        let ok = T::new(&[5, 0], &[9, 0], [2, 3], 10, &device).unwrap();
        assert_eq!((ok.len(), ok.n_rows(), ok.vocab_size()), (2, 6, 10));
        let positions: Vec<i64> = ok
            .positions()
            .to_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        assert_eq!(positions, [5, 0]);
        assert!(T::new(&[], &[], [0, 3], 10, &device).unwrap().is_empty());
    }
}
