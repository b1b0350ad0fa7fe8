//! Pseudo-log-likelihood scoring of sentences by a masked LM, and the verdict on a minimal
//! pair (Salazar et al. 2020, "Masked Language Model Scoring", ACL, §2.1).
//!
//! ```text
//! [CLS] w_1 … w_n [SEP] ──mask w_i, one copy per i──▶ n copies ──model──▶ logits at w_i
//!   ──log-softmax──▶ ──pick w_i──▶ log p(w_i | rest) ──sum over i──▶ PLL(W)
//! ```
//!
//! PLL-word-l2r (Kauf & Ivanova 2023, "A Better Way to Do Masked Language Model Scoring",
//! ACL, §3) also masks the tokens after `w_i` within its word
//! ([`PseudoLogLikelihood::score_word_l2r`]): the original PLL lets a word's later pieces
//! give its first away, which inflates the score of words split into many tokens.
//!
//! All copies of many sentences go into one forward pass, padded to the longest and with the
//! padding masked out, and only the masked row of each copy goes through the head
//! ([`MaskedTargets`]). A pair is right when the grammatical sentence scores higher; a tie
//! is wrong ([`prefers_grammatical`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

use crate::{MaskedTargets, MlmError};

/// A model that gives logits at chosen positions of a batch, e.g. a `BertForMaskedLM`.
pub trait MaskedLanguageModel {
    /// The logits at `targets`' positions.
    ///
    /// # Shapes
    /// - input_ids: `[batch, seq]`
    /// - padding_mask: `[batch, seq]`, `true` at padding (never attended to)
    /// - targets: `n_masked` flat positions `b * seq + s`
    /// - output: `[n_masked, vocab_size]`
    ///
    /// # Errors
    /// Whatever the model's head returns, e.g. [`MlmError::ShapeMismatch`].
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError>;

    /// The number of logit columns.
    fn vocab_size(&self) -> usize;

    /// The longest sequence the model takes, `[CLS]` and `[SEP]` included (its position
    /// table).
    fn max_seq_len(&self) -> usize;
}

/// The special tokens a sentence is framed and masked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialTokenIds {
    /// `[CLS]`, before the sentence.
    pub cls_id: u32,
    /// `[SEP]`, after it.
    pub sep_id: u32,
    /// `[MASK]`, in place of the token being scored.
    pub mask_id: u32,
    /// `[PAD]`, after `[SEP]` up to the longest copy of a batch.
    pub pad_id: u32,
}

/// Scores sentences by their pseudo-log-likelihood, in batches of at most `max_batch_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PseudoLogLikelihood {
    /// The ids of `[CLS]`, `[SEP]`, `[MASK]` and `[PAD]`.
    pub special: SpecialTokenIds,
    /// Copies × padded length per forward pass (a sentence's copies are never split, so a
    /// batch may exceed it by one sentence's copies). 8 192 keeps a tiny BERT's activations
    /// near 100 MiB per thread.
    pub max_batch_tokens: usize,
    /// Batches scored at once, each on a thread of its own: a CPU backend keeps much of a
    /// forward pass on one core. The scores do not depend on it.
    pub threads: usize,
}

impl PseudoLogLikelihood {
    /// A scorer with the default batch budget of 8 192 tokens, on as many threads as the
    /// machine has cores.
    pub fn new(special: SpecialTokenIds) -> Self {
        Self {
            special,
            max_batch_tokens: 8192,
            threads: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }

    /// `PLL(W) = Σ_i log p(w_i | W without w_i)` of each sentence, in nats, in the order
    /// given. The log-probabilities are f32 on the device; the sums are f64 on the host.
    ///
    /// # Shapes
    /// - sentences: token ids without `[CLS]`/`[SEP]`, each `1..=max_seq_len - 2` long
    /// - output: one PLL (≤ 0) per sentence
    ///
    /// # Errors
    /// [`MlmError::InvalidSentence`] naming the first sentence that is empty, longer than the
    /// model's positions or holds an id outside the vocabulary; [`MlmError::TokenIdOutOfVocab`]
    /// for a special id outside it; the model's own errors. Nothing runs before these checks.
    pub fn score(
        &self,
        model: &(impl MaskedLanguageModel + Sync),
        sentences: &[Vec<u32>],
        device: &Device,
    ) -> Result<Vec<f64>, MlmError> {
        self.score_masking(model, sentences, None, device)
    }

    /// PLL-word-l2r (Kauf & Ivanova 2023, §3): as [`score`](Self::score), but the copy that
    /// scores `w_i` also masks the tokens after it within its word, so
    /// `PLL(W) = Σ_i log p(w_i | W without w_i … the end of w_i's word)`. A word is a token
    /// that does not continue a word and the continuation tokens that follow it;
    /// `is_continuation[id]` says which ids continue one (WordPiece's `##` pieces; byte-level
    /// BPE's tokens without `Ġ`). For single-token words it equals the PLL.
    ///
    /// # Errors
    /// Those of [`score`](Self::score); [`MlmError::ShapeMismatch`] if `is_continuation`
    /// does not have `vocab_size` entries.
    pub fn score_word_l2r(
        &self,
        model: &(impl MaskedLanguageModel + Sync),
        sentences: &[Vec<u32>],
        is_continuation: &[bool],
        device: &Device,
    ) -> Result<Vec<f64>, MlmError> {
        if is_continuation.len() != model.vocab_size() {
            return Err(MlmError::ShapeMismatch {
                what: "is_continuation",
                expected: format!("[vocab_size = {}] tokens", model.vocab_size()),
                actual: vec![is_continuation.len()],
            });
        }
        self.score_masking(model, sentences, Some(is_continuation), device)
    }

    /// The PLLs, each copy masking its token and, with `is_continuation`, the rest of its
    /// word.
    fn score_masking(
        &self,
        model: &(impl MaskedLanguageModel + Sync),
        sentences: &[Vec<u32>],
        is_continuation: Option<&[bool]>,
        device: &Device,
    ) -> Result<Vec<f64>, MlmError> {
        self.check(model, sentences)?;
        // Shortest first, so each batch pads little; the scores go back to the given order.
        let mut order: Vec<usize> = (0..sentences.len()).collect();
        order.sort_by_key(|&i| sentences[i].len());
        let mut batches = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let end = self.batch_end(&order, start, sentences);
            batches.push(order[start..end].to_vec());
            start = end;
        }
        let mut plls = vec![0.0; sentences.len()];
        for (batch, scores) in
            self.score_batches(model, &batches, sentences, is_continuation, device)?
        {
            for (&i, pll) in batches[batch].iter().zip(scores) {
                plls[i] = pll;
            }
        }
        Ok(plls)
    }

    /// Every batch's PLLs, `(batch, scores)` in any order: `threads` workers take the next
    /// batch until none is left. A batch's scores do not depend on which worker ran it, nor
    /// when.
    fn score_batches(
        &self,
        model: &(impl MaskedLanguageModel + Sync),
        batches: &[Vec<usize>],
        sentences: &[Vec<u32>],
        is_continuation: Option<&[bool]>,
        device: &Device,
    ) -> Result<Vec<(usize, Vec<f64>)>, MlmError> {
        let next = AtomicUsize::new(0);
        let work = || -> Result<Vec<(usize, Vec<f64>)>, MlmError> {
            let mut done = Vec::new();
            loop {
                let batch = next.fetch_add(1, Ordering::Relaxed);
                let Some(members) = batches.get(batch) else {
                    return Ok(done);
                };
                let members: Vec<&[u32]> =
                    members.iter().map(|&i| sentences[i].as_slice()).collect();
                done.push((
                    batch,
                    self.score_batch(model, &members, is_continuation, device)?,
                ));
            }
        };
        let workers = self.threads.clamp(1, batches.len().max(1));
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
            let mut all = Vec::with_capacity(batches.len());
            for handle in handles {
                all.extend(handle.join().expect("a scoring thread panicked")?);
            }
            Ok(all)
        })
    }

    fn check(
        &self,
        model: &impl MaskedLanguageModel,
        sentences: &[Vec<u32>],
    ) -> Result<(), MlmError> {
        let (vocab_size, max_tokens) = (model.vocab_size(), model.max_seq_len().saturating_sub(2));
        let special = self.special;
        for (name, id) in [
            ("cls_id", special.cls_id),
            ("sep_id", special.sep_id),
            ("mask_id", special.mask_id),
            ("pad_id", special.pad_id),
        ] {
            if id as usize >= vocab_size {
                return Err(MlmError::TokenIdOutOfVocab {
                    name,
                    id,
                    vocab_size,
                });
            }
        }
        for (index, sentence) in sentences.iter().enumerate() {
            let reason = if sentence.is_empty() || sentence.len() > max_tokens {
                format!(
                    "{} tokens; the model scores 1 to {max_tokens} (its positions less [CLS] and [SEP])",
                    sentence.len()
                )
            } else if let Some(id) = sentence.iter().find(|&&id| id as usize >= vocab_size) {
                format!("token id {id} is outside the vocabulary [0, {vocab_size})")
            } else {
                continue;
            };
            return Err(MlmError::InvalidSentence { index, reason });
        }
        Ok(())
    }

    /// The end of the batch that starts at `order[start]`: sentences sorted by length, so
    /// the last one taken sets the padded length.
    fn batch_end(&self, order: &[usize], start: usize, sentences: &[Vec<u32>]) -> usize {
        let mut copies = 0;
        let mut end = start;
        while end < order.len() {
            let n = sentences[order[end]].len();
            if end > start && (copies + n) * (n + 2) > self.max_batch_tokens {
                break;
            }
            copies += n;
            end += 1;
        }
        end
    }

    /// The PLLs of one batch of sentences: every copy, one forward pass.
    fn score_batch(
        &self,
        model: &impl MaskedLanguageModel,
        batch: &[&[u32]],
        is_continuation: Option<&[bool]>,
        device: &Device,
    ) -> Result<Vec<f64>, MlmError> {
        let seq = batch.iter().map(|s| s.len() + 2).max().unwrap_or(2);
        let copies: usize = batch.iter().map(|s| s.len()).sum();
        let mut input = Vec::with_capacity(copies * seq);
        let mut padding = Vec::with_capacity(copies * seq);
        let (mut positions, mut targets) = (Vec::new(), Vec::new());
        for sentence in batch {
            for masked in 0..sentence.len() {
                let row = input.len() / seq;
                // The copy masks `masked` and, for PLL-word-l2r, its word's later pieces.
                let end = match is_continuation {
                    None => masked + 1,
                    Some(table) => {
                        masked
                            + 1
                            + sentence[masked + 1..]
                                .iter()
                                .take_while(|&&id| table[id as usize])
                                .count()
                    }
                };
                self.push_copy(sentence, masked..end, seq, &mut input, &mut padding);
                positions.push((row * seq + 1 + masked) as i64);
                targets.push(i64::from(sentence[masked]));
            }
        }
        let input_ids = Tensor::<2, Int>::from_data(TensorData::new(input, [copies, seq]), device);
        let padding_mask =
            Tensor::<2, Bool>::from_data(TensorData::new(padding, [copies, seq]), device);
        let targets = MaskedTargets::new(
            &positions,
            &targets,
            [copies, seq],
            model.vocab_size(),
            device,
        )?;
        // log p(true token) of each copy's masked position: log-softmax, then pick.
        let log_probs = log_softmax(model.masked_logits(input_ids, padding_mask, &targets)?, 1)
            .gather(1, targets.targets().clone().unsqueeze_dim(1));
        let log_probs: Vec<f32> = log_probs
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("a Float tensor converts to f32");
        let mut rest = log_probs.as_slice();
        Ok(batch
            .iter()
            .map(|sentence| {
                let (own, tail) = rest.split_at(sentence.len());
                rest = tail;
                own.iter().map(|&p| f64::from(p)).sum()
            })
            .collect())
    }

    /// Appends `[CLS] w_1 … [MASK] … w_n [SEP] [PAD]…`, `seq` long, with `[MASK]` at the
    /// sentence positions `masked`, and its padding mask.
    fn push_copy(
        &self,
        sentence: &[u32],
        masked: std::ops::Range<usize>,
        seq: usize,
        input: &mut Vec<i64>,
        padding: &mut Vec<bool>,
    ) {
        let special = self.special;
        input.push(i64::from(special.cls_id));
        input.extend(sentence.iter().enumerate().map(|(i, &id)| {
            i64::from(if masked.contains(&i) {
                special.mask_id
            } else {
                id
            })
        }));
        input.push(i64::from(special.sep_id));
        let pad = seq - sentence.len() - 2;
        input.extend(std::iter::repeat_n(i64::from(special.pad_id), pad));
        padding.extend(std::iter::repeat_n(false, seq - pad));
        padding.extend(std::iter::repeat_n(true, pad));
    }
}

/// The verdict on a minimal pair from the two PLLs: right only when the grammatical
/// sentence scores strictly higher (a tie is wrong, as in Zorro and BLiMP's scoring).
pub fn prefers_grammatical(good_pll: f64, bad_pll: f64) -> bool {
    good_pll > bad_pll
}
