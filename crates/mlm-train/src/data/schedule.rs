//! The batch schedule: which sequences make each micro-batch of a run. Epoch `e` visits the
//! training sequences in a permutation seeded by `(seed, e)`, one global batch after another,
//! so micro-batch `k` is a function of `k` alone and a resumed run (or another rank) sees
//! the same batches as an uninterrupted one.

use super::batch::epoch_order;
use super::folder::TokenSplit;

/// The sequences of every micro-batch of a run, in order, read from a memory-mapped split:
/// micro-batch `k` is read where it lies, so a resumed run seeks to it and replays nothing.
pub struct BatchSchedule<'a> {
    sequences: &'a TokenSplit,
    batch_size: usize,
    grad_accumulation: usize,
    seed: u64,
    /// The current epoch's permutation, recomputed when the epoch changes.
    order: Option<(u64, Vec<u32>)>,
}

impl<'a> BatchSchedule<'a> {
    /// Batches of `batch_size` sequences (the global batch: every rank's share together),
    /// `grad_accumulation` of them per optimizer step; the last incomplete batch of an epoch
    /// is dropped.
    ///
    /// # Panics
    /// If `sequences` holds fewer than `batch_size` sequences, or a size is 0
    /// ([`TrainConfig::validate`](crate::config::TrainConfig::validate) and data preparation
    /// refuse both first).
    pub fn new(
        sequences: &'a TokenSplit,
        batch_size: usize,
        grad_accumulation: usize,
        seed: u64,
    ) -> Self {
        assert!(
            batch_size > 0 && grad_accumulation > 0 && sequences.len() >= batch_size,
            "a schedule needs at least one batch of {batch_size} sequences"
        );
        Self {
            sequences,
            batch_size,
            grad_accumulation,
            seed,
            order: None,
        }
    }

    /// Micro-batch `k` of the run (0-based): epoch `k / batches_per_epoch`, position
    /// `k % batches_per_epoch` in that epoch's order.
    pub fn micro_batch(&mut self, k: u64) -> Vec<Vec<u32>> {
        let batches_per_epoch = (self.sequences.len() / self.batch_size) as u64;
        let epoch = k / batches_per_epoch;
        // Shuffle once per epoch, not once per micro-batch.
        if self.order.as_ref().map(|(e, _)| *e) != Some(epoch) {
            self.order = Some((epoch, epoch_order(self.sequences.len(), self.seed, epoch)));
        }
        let (_, order) = self.order.as_ref().expect("set above");
        let start = (k % batches_per_epoch) as usize * self.batch_size;
        let batch = order[start..start + self.batch_size]
            .iter()
            .map(|&i| self.sequences.sequence(i as usize))
            .collect();
        self.sequences.release_pages();
        batch
    }

    /// The micro-batches of optimizer step `step` (1-based), each with its index `k`.
    pub fn step(&mut self, step: usize) -> Vec<(u64, Vec<Vec<u32>>)> {
        (0..self.grad_accumulation)
            .map(|micro| {
                let k = ((step - 1) * self.grad_accumulation + micro) as u64;
                (k, self.micro_batch(k))
            })
            .collect()
    }
}
