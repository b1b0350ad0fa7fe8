//! libFuzzer target: see [`mlm_fuzz::loss`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mlm_fuzz::loss(data));
