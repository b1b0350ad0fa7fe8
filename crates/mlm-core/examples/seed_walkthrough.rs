//! The MLM objective step by step, with `mlm-core` doing every step.
//!
//! Run: `cargo run -p mlm-core --example seed_walkthrough`
//!
//! logits → exp → normalise → probability of the true word → −log → mean over the masked
//! positions M; then BERT's 80/10/10 corruption, where every selected slot is graded
//! against its original word.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use mlm_core::{IGNORE_INDEX, MaskingConfig, MlmError, masked_cross_entropy_with_labels};

/// The walkthrough's device: burn-flex, no autodiff.
fn device() -> Device {
    Device::flex()
}

fn logits(rows: &[[f32; 3]]) -> Tensor<2> {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), 3]), &device())
}

fn labels(values: &[i64]) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), &device())
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_into_vec::<f32>().unwrap()
}

/// One masked slot whose true word is "mat": logits → exp → sum → p(mat) → −log p.
fn one_slot(title: &str, row: [f32; 3]) -> Result<(), MlmError> {
    let words = ["mat", "car", "sky"];
    let z = logits(&[row]);
    let exps = floats(z.clone().exp());
    let sum: f32 = exps.iter().sum();
    let p = floats(softmax(z.clone(), 1));
    let loss = masked_cross_entropy_with_labels(z, labels(&[0]))?;
    println!("{title}");
    for (j, word) in words.iter().enumerate() {
        println!(
            "  {word:>4}: logit {:>5.1}  exp {:>9.3}  p = exp / {sum:.3} = {:.5}",
            row[j], exps[j], p[j]
        );
    }
    let loss: f32 = loss.loss.into_scalar();
    println!(
        "  true word \"mat\": loss = -ln p(mat) = -ln {:.5} = {loss:.6}\n",
        p[0]
    );
    Ok(())
}

fn main() -> Result<(), MlmError> {
    println!(
        "== 1. One masked slot: \"The cat sat on the [MASK].\" — candidates mat / car / sky ==\n"
    );
    one_slot("Step by step, logits (2, 1, 0):", [2.0, 1.0, 0.0])?;
    one_slot(
        "A tie (1, 1, 1): no preference, 1/3 each, loss ln 3:",
        [1.0, 1.0, 1.0],
    )?;
    one_slot(
        "A runaway (10, 1, 0): nearly certain, nearly free:",
        [10.0, 1.0, 0.0],
    )?;

    println!("== 2. A 10-token sentence with |M| = 2 masks: the mean over M only ==\n");
    let sentence = [
        "the", "cat", "sat", "on", "the", "mat", "and", "saw", "the", "sky",
    ];
    // Visible tokens carry -100 and whatever logits the model produced; they count for nothing.
    let mut rows = [[5.0, -3.0, 8.0]; 10];
    rows[5] = [2.0, 1.0, 0.0]; // masked "mat" (id 0)
    rows[9] = [1.0, 1.0, 1.0]; // masked "sky" (id 2)
    let mut label = [IGNORE_INDEX; 10];
    label[5] = 0;
    label[9] = 2;
    let out = masked_cross_entropy_with_labels(logits(&rows), labels(&label))?;
    let shown: Vec<String> = sentence
        .iter()
        .zip(label)
        .map(|(w, l)| {
            if l == IGNORE_INDEX {
                w.to_string()
            } else {
                "[MASK]".into()
            }
        })
        .collect();
    println!("  input : {}", shown.join(" "));
    for (position, &label) in label.iter().enumerate() {
        if label != IGNORE_INDEX {
            let one = masked_cross_entropy_with_labels(
                logits(&rows[position..=position]),
                labels(&[label]),
            )?;
            let loss: f32 = one.loss.into_scalar();
            println!(
                "  slot {position}: true \"{}\", loss {loss:.6}",
                sentence[position]
            );
        }
    }
    println!("  the 8 visible tokens: label -100, not computed, zero gradient");
    println!(
        "  loss  = sum / |M| = {:.6} / {} = {:.6}\n",
        out.loss_sum.into_scalar::<f32>(),
        out.n_graded,
        out.loss.into_scalar::<f32>()
    );

    println!(
        "== 3. BERT 80/10/10: of the selected tokens, [MASK] 80 % / random 10 % / unchanged 10 % ==\n"
    );
    println!(
        "  (BERT selects 15 % of the tokens; this 12-token demo selects 50 % to show all three kinds)\n"
    );
    let vocab = [
        "[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "and", "saw", "sky",
        "dog", "ran", "far", "away",
    ];
    let special = vec![0, 1, 2, 3];
    let ids: Vec<u32> = [1, 4, 5, 6, 7, 4, 8, 9, 10, 4, 11, 2].to_vec();
    // Look for the first seed whose draw shows all three kinds of slot in one sentence.
    for seed in 0.. {
        let mut masker = MaskingConfig::new(vocab.len(), 3, 0, special.clone())
            .with_mlm_probability(0.5)
            .with_seed(seed)
            .init()?;
        let batch = masker.mask(std::slice::from_ref(&ids))?;
        let kinds: Vec<(usize, &str)> = batch
            .masked_positions
            .iter()
            .map(|&(_, p)| {
                let kind = match batch.input_ids[0][p] {
                    3 => "[MASK]",
                    c if c == ids[p] => "unchanged",
                    _ => "random",
                };
                (p, kind)
            })
            .collect();
        if ["[MASK]", "random", "unchanged"]
            .iter()
            .all(|k| kinds.iter().any(|(_, kind)| kind == k))
        {
            let words = |ids: &[u32]| -> String {
                ids.iter()
                    .map(|&i| vocab[i as usize])
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            println!("  seed {seed}");
            println!("  original : {}", words(&ids));
            println!("  corrupted: {}", words(&batch.input_ids[0]));
            for (p, kind) in kinds {
                println!(
                    "    slot {p:>2}: {kind:<9} shows {:<6} graded against \"{}\" (label {})",
                    vocab[batch.input_ids[0][p] as usize],
                    vocab[ids[p] as usize],
                    batch.labels[0][p]
                );
            }
            println!("  The input changes; the target never does.");
            break;
        }
    }
    Ok(())
}
