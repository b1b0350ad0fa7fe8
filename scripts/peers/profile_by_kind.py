"""Sorts the samples of a system-wide `perf record -a --call-graph dwarf` profile of one
process by kind of work, as shares of the machine's time (every core, idle ones included).

    perf script -i perf.data -F pid,comm,ip,sym --no-inline | python profile_by_kind.py [--json F]

The process is the pid with the most samples; other processes' samples are dropped, and the
idle task's (`swapper`, pid 0) count as cores waiting. Each sample goes to the first kind
below whose leaf pattern matches the function the core was in, else to the first kind whose
stack pattern matches a frame of its stack, else to "other". So a `memset` or page fault under
a matmul's output allocation counts as zeroing, not as the product, a thread parked inside
gemm's parallel loop as a hand-off, and gemm's own loop over its tiles (inlined into a
thread-local access, `LocalKey::with`, whose name says nothing) as the product, under
gemm's generic driver or its f32 entry alike. Prints the four groups the step is judged by (products;
zeroing and page faults; elementwise kernels; thread hand-offs and idle cores) and the kinds
within them, as a Markdown table.
"""

import argparse
import collections
import json
import re
import sys

# (group, kind, leaf pattern, stack pattern)
KINDS = [
    ("zeroing and page faults", "memset of fresh buffers", r"memset", None),
    ("zeroing and page faults", "page faults, the kernel clearing pages, the allocator",
     r"clear_page|page_fault|handle_mm_fault|do_anonymous|zap_|unmap|mmap|free_pages|"
     r"alloc_pages|get_page|folio|lru|__pte|_mi_|mi_malloc|mi_free|malloc|cfree|_int_free",
     r"asm_exc_page_fault|clear_page|__x64_sys_munmap|__x64_sys_mmap|__x64_sys_madvise"),
    ("thread hand-offs and idle cores", "idle cores", r"^\[idle\]$", None),
    ("thread hand-offs and idle cores", "waking, waiting, yielding, scheduling",
     r"futex|schedule|task_switch|sched_yield|_raw_spin|wake_up|try_to_wake|rayon_core|"
     r"crossbeam|wait_until|syscall|SYSCALL|irqentry|exit_to_user|\[unknown\]|kmp_|gomp_|"
     r"omp_|__sched|pthread_cond|sem_", None),
    ("products", "matrix products (gemm, packing included)",
     r"gemm|sgemm|mkl_blas|mkl_|dnnl|brgemm|jit_|cblas",
     r"gemm_common::gemm::gemm_basic_generic|gemm_f32::gemm::|mkl_blas"),
    ("elementwise kernels", "loss (fused cross-entropy)", r"cross_entropy", r"cross_entropy"),
    ("elementwise kernels", "GELU", r"gelu|Gelu", r"gelu|Gelu"),
    ("elementwise kernels", "LayerNorm", r"layer_norm|LayerNorm", r"layer_norm"),
    ("elementwise kernels", "attention softmax", r"softmax", r"softmax"),
    ("elementwise kernels", "AdamW", r"[Aa]dam", r"[Aa]dam"),
    ("elementwise kernels", "copies", r"memmove|memcpy|to_contiguous|StridedIter|copy", None),
    ("elementwise kernels", "adds, gradient sums, reductions, gathers",
     r"zip|binary|unary|scalar|reduce|sum|add_assign|add_rows|gather|select|embedding|macerator|vectorized|"
     r"at::native|at::vec|_ZN2at|c10", None),
    ("bookkeeping", "autodiff graph, dispatch and host work", None, None),
]
GROUPS = ["products", "zeroing and page faults", "elementwise kernels",
          "thread hand-offs and idle cores", "bookkeeping"]


def samples(lines):
    """(pid, comm, [frames, leaf first]) of each sample of `perf script -F pid,comm,ip,sym`."""
    stack = []
    for line in lines + [""]:
        if line.strip():
            stack.append(line.strip())
            continue
        if stack:
            comm, pid = stack[0].rsplit(None, 1)  # perf prints the comm first
            frames = [f.split(None, 1)[1] if " " in f else f for f in stack[1:]]
            yield int(pid), comm, frames
        stack = []


def kind_of(pid, frames):
    if pid == 0:
        return "idle cores"
    leaf = frames[0] if frames else "[unknown]"
    for _, kind, leaf_pattern, _ in KINDS:
        if leaf_pattern and re.search(leaf_pattern, leaf):
            return kind
    whole = " ".join(frames[1:])
    for _, kind, _, stack_pattern in KINDS:
        if stack_pattern and re.search(stack_pattern, whole):
            return kind
    return "autodiff graph, dispatch and host work"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the group shares here")
    args = parser.parse_args()
    parsed = list(samples(sys.stdin.read().split("\n")))
    busy = collections.Counter(pid for pid, _, _ in parsed if pid != 0)
    target = busy.most_common(1)[0][0]
    counts = collections.Counter(kind_of(pid, frames) for pid, _, frames in parsed
                                 if pid in (0, target))
    total = sum(counts.values())
    group_of = {kind: group for group, kind, _, _ in KINDS}
    shares = {g: 100 * sum(n for k, n in counts.items() if group_of[k] == g) / total
              for g in GROUPS}
    print("| group | kind of work | share of the machine's time |\n|---|---|---:|")
    for group in GROUPS:
        print(f"| **{group}** | | **{shares[group]:.1f} %** |")
        for g, kind, _, _ in KINDS:
            if g == group and counts[kind]:
                print(f"| | {kind} | {100 * counts[kind] / total:.1f} % |")
    print(f"\n{total} samples ({counts['idle cores']} idle); outside the products: "
          f"{100 - shares['products']:.1f} %")
    if args.json:
        json.dump({"samples": total, "groups": shares}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
