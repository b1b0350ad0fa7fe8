//! One seed, many independent random streams: every generator of a run is keyed by
//! `(seed, stream, index)`, so that no two uses of the seed share numbers (the weights'
//! draw and the data order, say), and a step's draws depend on the step alone, which is what
//! makes a resumed run replay an uninterrupted one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a random stream is for. The byte values are part of every run's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stream {
    /// The training masks of batch `index`: `mlm-core`'s `Masker` keys its per-batch
    /// generator the same way with stream byte 0, so this names it; it is drawn there.
    TrainingMasks = 0,
    /// The initial weights (index 0).
    Init = 1,
    /// The dropout masks of optimizer step `index`.
    Dropout = 2,
    /// The held-out masks (a masker seeded from index 0).
    HeldOutMasks = 3,
    /// The synthetic batch of `bench backends` (index 0).
    BenchData = 4,
    /// The order of the training sequences in epoch `index`.
    EpochOrder = 0xda,
}

/// The generator of `stream` number `index` of `seed`: ChaCha12 (rand's `StdRng`) keyed
/// with the seed's bytes, then the index's (little-endian), then the stream's byte; the
/// same numbers on every platform.
pub fn stream_rng(seed: u64, stream: Stream, index: u64) -> StdRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    key[16] = stream as u8;
    StdRng::from_seed(key)
}

/// A 64-bit seed for a generator that takes one (the backend's, a `Masker`'s): the first
/// draw of [`stream_rng`].
pub fn derive_seed(seed: u64, stream: Stream, index: u64) -> u64 {
    stream_rng(seed, stream, index).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_indices_are_independent_and_reproducible() {
        let draws = |stream, index| derive_seed(42, stream, index);
        assert_eq!(draws(Stream::Dropout, 7), draws(Stream::Dropout, 7));
        let all = [
            draws(Stream::Dropout, 7),
            draws(Stream::Dropout, 8),
            draws(Stream::HeldOutMasks, 7),
            draws(Stream::Init, 7),
            derive_seed(43, Stream::Dropout, 7),
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| a != b), "{all:?}");
        }
    }
}
