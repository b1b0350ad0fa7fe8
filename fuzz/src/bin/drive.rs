//! Runs a fuzz target's body on the stable toolchain, where libFuzzer's instrumentation is
//! not available: random inputs (fresh bytes, or a seed input with random bytes flipped,
//! inserted or cut) for a number of seconds. Prints executions and findings; each finding's
//! input is written to `artifacts/TARGET/` for a regression test.
//!
//! `cargo run --release --bin drive -- masker|loss|corpus SECONDS [SEED]`

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: drive masker|loss|corpus SECONDS [SEED]";
    let target: fn(&[u8]) = match args.get(1).map(String::as_str) {
        Some("masker") => mlm_fuzz::masker,
        Some("loss") => mlm_fuzz::loss,
        Some("corpus") => mlm_fuzz::corpus,
        _ => panic!("{usage}"),
    };
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).expect(usage);
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
    let name = &args[1];
    let mut rng = StdRng::seed_from_u64(seed);
    // Seed inputs: real text for the corpus target, and the inputs found so far.
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/mlm-train/tests/fixtures/corpus/chapter_1.txt"
    ))
    .unwrap();
    let mut pool: Vec<Vec<u8>> = vec![text[..text.len().min(2000)].to_vec()];
    std::panic::set_hook(Box::new(|_| {}));
    let artifacts = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("artifacts")
        .join(name);
    let (started, limit) = (Instant::now(), Duration::from_secs(seconds));
    let (mut executions, mut findings) = (0u64, 0u64);
    while started.elapsed() < limit {
        let input = if rng.random_bool(0.5) {
            let len = rng.random_range(0..256);
            let mut bytes = vec![0u8; len];
            rng.fill_bytes(&mut bytes);
            bytes
        } else {
            mutate(&pool[rng.random_range(0..pool.len())], &mut rng)
        };
        executions += 1;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&input))) {
            findings += 1;
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            std::fs::create_dir_all(&artifacts).unwrap();
            let file = artifacts.join(format!("finding-{findings}"));
            std::fs::write(&file, &input).unwrap();
            eprintln!("finding {findings} ({}): {message}", file.display());
        } else if pool.len() < 256 && rng.random_bool(0.01) {
            pool.push(input);
        }
    }
    println!("{name}: {executions} executions in {seconds} s, {findings} findings");
}

/// Flips, inserts or cuts a few random bytes of `input`.
fn mutate(input: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut bytes = input.to_vec();
    for _ in 0..rng.random_range(1..8) {
        let at = rng.random_range(0..=bytes.len());
        match rng.random_range(0..3) {
            0 if at < bytes.len() => bytes[at] = rng.random(),
            1 => bytes.insert(at, rng.random()),
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => {}
        }
    }
    bytes
}
