//! The word-frequency baseline of a minimal-pair suite: a sentence scores the sum of its
//! tokens' log unigram probabilities, fitted on the run's own training tokens, so a pair
//! goes to the sentence of more frequent (and fewer) tokens. Zorro's authors plot such a
//! baseline beside every model (Huebner et al. 2021, §5); a model above it uses more than
//! word frequency.
//!
//! ```text
//! unigram_counts.npy ──add-one──▶ log p(id) ──sum over the sentence's ids──▶ score
//! ```

/// Log unigram probabilities of a vocabulary, add-one smoothed.
#[derive(Debug, Clone, PartialEq)]
pub struct UnigramScorer {
    /// `log p(id)` in nats, `[vocab_size]`.
    log_probs: Vec<f64>,
}

impl UnigramScorer {
    /// Fitted on `counts` (`[vocab_size]`: how often each id occurs in the training split,
    /// a data folder's `unigram_counts.npy`) with the `special_ids` left out:
    /// `p(id) = (count + 1) / (total + n)` over the `n` ids that are not special (Laplace's
    /// add-one), so a token never seen in training costs `-ln(total + n)` and no sentence
    /// scores −∞. A special id gets the probability of an unseen token.
    pub fn fit(counts: &[u64], special_ids: &[u32]) -> Self {
        let mut counts = counts.to_vec();
        for &id in special_ids {
            if let Some(count) = counts.get_mut(id as usize) {
                *count = 0;
            }
        }
        let ordinary = counts.len() - special_ids.len().min(counts.len());
        let total = counts.iter().sum::<u64>() as f64 + ordinary as f64;
        Self {
            log_probs: counts
                .iter()
                .map(|&count| ((count + 1) as f64 / total).ln())
                .collect(),
        }
    }

    /// `Σ log p(id)` over `ids`, in nats (≤ 0). The terms are summed in the ids' sorted
    /// order, so two sentences of the same tokens in another order score exactly the same:
    /// a tie, which a minimal pair counts as wrong.
    ///
    /// # Panics
    /// If an id is outside the vocabulary the scorer was fitted on (the scorer's callers
    /// check ids against the model's vocabulary first).
    pub fn score(&self, ids: &[u32]) -> f64 {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        sorted.iter().map(|&id| self.log_probs[id as usize]).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids 0 and 1 special; 2, 3 and 4 seen 5, 3 and 0 times: p = 6/11, 4/11, 1/11.
    fn scorer() -> UnigramScorer {
        UnigramScorer::fit(&[7, 9, 5, 3, 0], &[0, 1])
    }

    #[test]
    fn add_one_probabilities_of_the_ordinary_ids() {
        let scorer = scorer();
        let expected: [f64; 5] = [1.0 / 11.0, 1.0 / 11.0, 6.0 / 11.0, 4.0 / 11.0, 1.0 / 11.0];
        for (id, p) in expected.iter().enumerate() {
            assert!(
                (scorer.score(&[id as u32]) - p.ln()).abs() < 1e-15,
                "id {id}"
            );
        }
        let ordinary: f64 = (2..5).map(|id| scorer.score(&[id]).exp()).sum();
        assert!((ordinary - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_sentence_sums_its_tokens_and_a_reordering_ties_exactly() {
        let scorer = scorer();
        let expected = (6.0f64 / 11.0).ln() * 2.0 + (4.0f64 / 11.0).ln() + (1.0f64 / 11.0).ln();
        assert!((scorer.score(&[2, 3, 2, 4]) - expected).abs() < 1e-12);
        assert_eq!(scorer.score(&[2, 3, 2, 4]), scorer.score(&[4, 2, 3, 2]));
        // More frequent tokens win, and so do fewer tokens.
        assert!(scorer.score(&[2, 2]) > scorer.score(&[2, 3]));
        assert!(scorer.score(&[3]) > scorer.score(&[3, 2]));
    }
}
