//! The attention kernel over contiguous `f32` data: one task per (sequence, head), each two
//! matrix products (the gemm crate, reading the head's columns in place through strides)
//! around a softmax over each query's row of scores; backward four products and the
//! softmax's backward. Tasks write disjoint column blocks of the outputs, so the result does
//! not depend on which thread ran what.

use rayon::prelude::*;

use super::cpu;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) batch: usize,
    pub(super) seq: usize,
    pub(super) heads: usize,
    pub(super) d_model: usize,
    /// Elements from one token's query (key, value) to the next's, and so of their gradients:
    /// `d_model` for three tensors, `3·d_model` for one packed `[q | k | v]` tensor.
    pub(super) qkv_stride: usize,
}

impl Dims {
    fn d_head(&self) -> usize {
        self.d_model / self.heads
    }

    /// `1/√d_head`, the scores' scale.
    fn scale(&self) -> f32 {
        (self.d_head() as f32).sqrt().recip()
    }

    /// Offset of head `h` of sequence `b` in a buffer of `row_stride` elements a token.
    fn offset(&self, bh: usize, row_stride: usize) -> usize {
        let (b, h) = (bh / self.heads, bh % self.heads);
        b * self.seq * row_stride + h * self.d_head()
    }
}

/// A `rows × cols` matrix inside a buffer: first element and strides (in elements).
#[derive(Clone, Copy)]
struct View {
    ptr: *const f32,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl View {
    /// Head `bh` of a buffer of `row_stride` elements a token: `[seq, d_head]`, or
    /// `[d_head, seq]` when `transposed`.
    fn head(x: &[f32], dims: Dims, bh: usize, row_stride: usize, transposed: bool) -> Self {
        let ptr = x[dims.offset(bh, row_stride)..].as_ptr();
        Self::new(ptr, [dims.seq, dims.d_head()], [row_stride, 1], transposed)
    }

    /// A row-major `[seq, seq]` block, transposed when `transposed`.
    fn square(x: &[f32], seq: usize, transposed: bool) -> Self {
        Self::new(x.as_ptr(), [seq, seq], [seq, 1], transposed)
    }

    fn new(ptr: *const f32, [rows, cols]: [usize; 2], [rs, cs]: [usize; 2], t: bool) -> Self {
        let (rows, cols, row_stride, col_stride) = if t {
            (cols, rows, cs, rs)
        } else {
            (rows, cols, rs, cs)
        };
        Self {
            ptr,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }
}

/// A pointer the tasks share to write disjoint blocks of one buffer.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: every task writes only its own head's block (see `Dims::offset`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The element at `offset`. (A method, so closures capture the whole `Out`.)
    fn at(self, offset: usize) -> *mut f32 {
        // SAFETY (of the arithmetic): callers pass offsets inside the buffer.
        unsafe { self.0.add(offset) }
    }
}

/// `dst = beta · lhs · rhs`, `dst` row-major with row stride `dst_row_stride`, on this
/// thread.
///
/// # Safety
/// The views must lie inside live buffers, `dst` must hold `lhs.rows × rhs.cols` elements
/// at that stride, and no other thread may touch them.
unsafe fn gemm(dst: *mut f32, dst_row_stride: usize, lhs: View, rhs: View, beta: f32) {
    debug_assert_eq!(lhs.cols, rhs.rows);
    let s = |x: usize| x as isize;
    unsafe {
        gemm::gemm(
            lhs.rows,
            rhs.cols,
            lhs.cols,
            dst,
            1,
            s(dst_row_stride),
            false,
            lhs.ptr,
            s(lhs.col_stride),
            s(lhs.row_stride),
            rhs.ptr,
            s(rhs.col_stride),
            s(rhs.row_stride),
            0.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `(context [batch, seq, d_model], probs [batch, heads, seq, seq])` of `q`, `k`, `v`
/// (`[batch, seq, _]` at [`Dims::qkv_stride`]) plus their `bias` (`[3·d_model]`: query, key
/// and value side by side; empty for none) and `key_bias [batch, seq]`. The bias is added to
/// `q`, `k`, `v` in place, each head's by the task that then reads it (in cache), so that
/// the backward reads the biased values as they are.
///
/// # Safety
/// Each of `qkv` must point to a live buffer that holds its `[batch, seq, d_model]` at that
/// stride, and no other thread may touch them during the call.
pub(super) unsafe fn forward(
    qkv: [*mut f32; 3],
    bias: &[f32],
    key_bias: &[f32],
    dims: Dims,
) -> (Vec<f32>, Vec<f32>) {
    let (seq, stride) = (dims.seq, dims.qkv_stride);
    let [q, k, v] = qkv.map(Out);
    // Every head's block of the context is written (not read) by its task's second product:
    // the buffer is not zeroed first.
    let context_len = dims.batch * seq * dims.d_model;
    let mut context = Vec::with_capacity(context_len);
    let mut probs = vec![0f32; dims.batch * dims.heads * seq * seq];
    let out = Out(context.as_mut_ptr());
    probs
        .par_chunks_mut(seq * seq)
        .enumerate()
        .for_each(|(bh, p)| {
            let key_bias = &key_bias[bh / dims.heads * seq..][..seq];
            let off = dims.offset(bh, stride);
            if !bias.is_empty() {
                // SAFETY: the head's blocks of q, k, v are this task's alone.
                unsafe { add_head_bias([q, k, v].map(|x| x.at(off)), bias, dims, bh) };
            }
            let head = |x: Out, transposed| {
                View::new(x.at(off), [seq, dims.d_head()], [stride, 1], transposed)
            };
            // SAFETY: the views lie inside q, k, v and `p`; the context block is this
            // head's own (`Out`).
            // S = q kᵀ / √d, then P = softmax(S + key_bias) row by row, then context = P v.
            unsafe {
                gemm(
                    p.as_mut_ptr(),
                    seq,
                    head(q, false),
                    head(k, true),
                    dims.scale(),
                )
            };
            p.chunks_mut(seq)
                .for_each(|row| cpu::softmax(row, key_bias));
            let p = View::square(p, seq, false);
            unsafe {
                gemm(
                    out.at(dims.offset(bh, dims.d_model)),
                    dims.d_model,
                    p,
                    head(v, false),
                    1.0,
                )
            };
        });
    // SAFETY: the tasks above wrote every block of the context's `context_len` values.
    unsafe { context.set_len(context_len) };
    (context, probs)
}

/// `x ← x + bias` for head `bh`'s blocks `[seq, d_head]` of query, key and value (at
/// `heads`, their first elements), each with its part of `bias` `[3·d_model]`.
///
/// # Safety
/// Each of `heads` must point to a live block of `seq` rows of `d_head` values at
/// [`Dims::qkv_stride`] that no other thread touches during the call.
unsafe fn add_head_bias(heads: [*mut f32; 3], bias: &[f32], dims: Dims, bh: usize) {
    let (d_head, h) = (dims.d_head(), bh % dims.heads);
    for (i, head) in heads.into_iter().enumerate() {
        let bias = &bias[i * dims.d_model + h * d_head..][..d_head];
        for row in 0..dims.seq {
            // SAFETY: row `row` of the block, as the caller vouches.
            let row =
                unsafe { std::slice::from_raw_parts_mut(head.add(row * dims.qkv_stride), d_head) };
            cpu::add_assign(row, bias);
        }
    }
}

/// `[∂q, ∂k, ∂v]` into `d_qkv` (each `[batch, seq, _]` at [`Dims::qkv_stride`], every
/// element written, none read: the buffers need no zeroing), from what [`forward`] saw and
/// returned (`probs`) and the gradient of its context `d_context` `[batch, seq, d_model]`.
///
/// # Safety
/// Each of `d_qkv` must point to a live buffer that holds its `[batch, seq, d_model]` at
/// that stride, and no other thread may touch them during the call.
pub(super) unsafe fn backward(
    [q, k, v]: [&[f32]; 3],
    probs: &[f32],
    d_context: &[f32],
    dims: Dims,
    [dq, dk, dv]: [*mut f32; 3],
) {
    let (seq, d_model, stride) = (dims.seq, dims.d_model, dims.qkv_stride);
    let [dq, dk, dv] = [dq, dk, dv].map(Out);
    probs.par_chunks(seq * seq).enumerate().for_each_init(
        || vec![0f32; seq * seq],
        |ds, (bh, p)| {
            let off = dims.offset(bh, stride);
            let head = |x, transposed| View::head(x, dims, bh, stride, transposed);
            let d_out = View::head(d_context, dims, bh, d_model, false);
            // SAFETY: as in `forward`; each task writes its own head's blocks and `ds`.
            // ∂v = Pᵀ ∂context; ∂P = ∂context vᵀ (into `ds`).
            unsafe {
                gemm(dv.at(off), stride, View::square(p, seq, true), d_out, 1.0);
                gemm(ds.as_mut_ptr(), seq, d_out, head(v, true), 1.0);
            }
            // ∂S = P ⊙ (∂P − rowsum(∂P ⊙ P)); the 1/√d of S goes into the products below.
            p.chunks(seq)
                .zip(ds.chunks_mut(seq))
                .for_each(|(p, d)| cpu::softmax_backward(p, d));
            let scale = dims.scale();
            // ∂q = ∂S k / √d; ∂k = ∂Sᵀ q / √d.
            unsafe {
                let (d_s, d_st) = (View::square(ds, seq, false), View::square(ds, seq, true));
                gemm(dq.at(off), stride, d_s, head(k, false), scale);
                gemm(dk.at(off), stride, d_st, head(q, false), scale);
            }
        },
    );
}
