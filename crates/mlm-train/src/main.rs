//! `mlm-train`: pretrain a tiny BERT, fill in masks, evaluate, import from and export to
//! Hugging Face. The commands live in [`mlm_train::cli`]; this file sets up the process.

use std::process::ExitCode;

// mimalloc, not glibc's malloc: glibc hands the freed blocks of a step's large tensors back to
// the kernel, and the next op faults fresh zeroed pages in (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay`: its index in the `mi_option_e` enum of the mimalloc 3 header that
/// libmimalloc-sys =0.1.49 vendors (`c_src/mimalloc/v3/include/mimalloc.h`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Never purge freed memory: a training step frees and reallocates the same tensor sizes
    // every step, and a purged page comes back as a page fault and a cleared page (~10 % of
    // the main job's step). The peak resident memory is unchanged.
    // SAFETY: sets a process-wide option before any thread starts; -1 is a valid value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // The command runs on a thread of the pool its kernels run on: each parallel region then
    // starts from inside the pool, instead of waking a worker and parking this thread until
    // it is done (reschedule interrupts and idle cores, 2–3 % of the main job's step).
    match rayon::ThreadPoolBuilder::new()
        .stack_size(MAIN_STACK)
        .build()
    {
        Ok(pool) => ExitCode::from(pool.install(mlm_train::cli::main)),
        Err(_) => ExitCode::from(mlm_train::cli::main()),
    }
}

/// The stack of the thread the command runs on: the 8 MiB a Linux main thread gets.
const MAIN_STACK: usize = 8 << 20;
