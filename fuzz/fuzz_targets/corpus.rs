//! libFuzzer target: see [`mlm_fuzz::corpus`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlm_fuzz::corpus(data));
