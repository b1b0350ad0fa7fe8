//! `mlm-train`: the pretraining command line (in progress).

fn main() {
    eprintln!("mlm-train: the training run is not built yet; see README.md");
    std::process::exit(2);
}
