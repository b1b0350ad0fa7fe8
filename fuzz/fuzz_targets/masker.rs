//! libFuzzer target: see [`mlm_fuzz::masker`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlm_fuzz::masker(data));
