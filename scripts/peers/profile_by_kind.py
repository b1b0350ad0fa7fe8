"""Sorts the samples of a `perf record --call-graph dwarf` profile by kind of work.

    perf script -i perf.data -F ip,sym --no-inline | python profile_by_kind.py

Each sample goes to the first kind (in the order below) that one of its frames names, so a
page fault under a matmul's output allocation counts as allocation, not as the matmul. Prints
a Markdown table: kind, share of all samples.
"""

import collections
import re
import sys

KINDS = [
    ("loss (fused cross-entropy kernel)", r"cross_entropy_row|fused::flex::kernel|fused::flex::tracked"),
    ("GELU (fused kernel)", r"fused::cpu::gelu|GeluBackward|flex_gelu"),
    ("allocation: zeroing, copying and faulting in fresh buffers",
     r"FlexTensor::empty|__memset|clear_page|page_fault|_mi_|mi_malloc|mi_free"),
    ("matmuls (gemm, packing included)", r"gemm|matmul"),
    ("attention softmax", r"softmax"),
    ("LayerNorm", r"layer_norm"),
    ("AdamW", r"[Aa]dam"),
    ("gradient clipping and the sum over shards", r"clip_global_norm|GradientsAccumulator|accumulate"),
    ("layout copies (reshape / swap of non-contiguous views)", r"to_contiguous|float_reshape|StridedIter"),
    ("other elementwise ops (adds, scaling, mask bias, embedding gathers)",
     r"binary_op|unary_op|scalar_op|run_broadcast|gather|select|embedding"),
    ("autodiff bookkeeping (graph, gradient maps)", r"burn_autodiff"),
    ("masking and batches (host)", r"[Mm]ask|to_device|make_shards"),
    ("threads: waking, waiting, scheduling", r"rayon|futex|schedule|finish_task_switch|thread"),
]


def main():
    counts = collections.Counter()
    total = 0
    stack = []
    for line in sys.stdin.read().split("\n") + [""]:
        if line.strip():
            stack.append(line)
            continue
        if not stack:
            continue
        frames = " ".join(stack[1:]) if len(stack) > 1 else stack[0]
        kind = next((k for k, pattern in KINDS if re.search(pattern, frames)), "other")
        counts[kind] += 1
        total += 1
        stack = []
    print("| kind of work | share of samples |\n|---|---:|")
    for kind, _ in KINDS + [("other", "")]:
        if counts[kind]:
            print(f"| {kind} | {100 * counts[kind] / total:.1f} % |")
    print(f"\n{total} samples")


if __name__ == "__main__":
    main()
