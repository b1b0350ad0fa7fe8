//! The linear layer's kernels over contiguous row-major `f32` data: `y = x W + b` and its
//! three gradients. Every output is written whole by one gemm call (or one sweep), so none is
//! zeroed first: the bias rows are the product's starting value, and the gradients are
//! products into fresh memory.

/// The shape of one linear call: `x [rows, d_in] · W [d_in, d_out]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub(super) rows: usize,
    pub(super) d_in: usize,
    pub(super) d_out: usize,
}

/// A row-major `rows × cols` matrix at `ptr`, or its transpose.
#[derive(Clone, Copy)]
struct Matrix {
    ptr: *const f32,
    rows: usize,
    cols: usize,
    transposed: bool,
}

impl Matrix {
    fn of(x: &[f32], [rows, cols]: [usize; 2], transposed: bool) -> Self {
        debug_assert_eq!(x.len(), rows * cols);
        Self {
            ptr: x.as_ptr(),
            rows,
            cols,
            transposed,
        }
    }

    /// `(rows, cols, row stride, column stride)` as seen, transposed or not.
    fn strides(self) -> (usize, usize, isize, isize) {
        let (rs, cs) = (self.cols as isize, 1);
        match self.transposed {
            false => (self.rows, self.cols, rs, cs),
            true => (self.cols, self.rows, cs, rs),
        }
    }
}

/// From this many multiply-adds a product runs on every thread (burn-flex's threshold).
const PARALLEL_MACS: usize = 192 * 192 * 192;

/// `lhs · rhs` into a fresh row-major buffer; with `start`, `start + lhs · rhs` (`start` is
/// the buffer's first value, consumed). No element is zeroed first.
fn product(lhs: Matrix, rhs: Matrix, start: Option<Vec<f32>>) -> Vec<f32> {
    let (m, k, lhs_rs, lhs_cs) = lhs.strides();
    let (k_rhs, n, rhs_rs, rhs_cs) = rhs.strides();
    debug_assert_eq!(k, k_rhs);
    let read_dst = start.is_some();
    let mut out = start.unwrap_or_default();
    if k == 0 {
        out.resize(m * n, 0.0); // gemm writes nothing when the inner dimension is empty
        return out;
    }
    out.reserve_exact(m * n - out.len());
    let parallelism = match m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MACS {
        true => gemm::Parallelism::Rayon(0),
        false => gemm::Parallelism::None,
    };
    // SAFETY: the output has room for m × n elements, written (or, with `read_dst`, read
    // and written) by gemm before `set_len`; the inputs lie inside their slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            read_dst,
            lhs.ptr,
            lhs_cs,
            lhs_rs,
            rhs.ptr,
            rhs_cs,
            rhs_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
        out.set_len(m * n);
    }
    out
}

/// `y = x W (+ b)`, `[rows, d_out]`: the bias repeated over the rows, then the product
/// accumulated onto it.
pub(super) fn forward(x: &[f32], w: &[f32], bias: Option<&[f32]>, s: Shape) -> Vec<f32> {
    let start = bias.map(|b| b.repeat(s.rows));
    let x = Matrix::of(x, [s.rows, s.d_in], false);
    product(x, Matrix::of(w, [s.d_in, s.d_out], false), start)
}

/// `∂x = ∂y Wᵀ`, `[rows, d_in]`.
pub(super) fn input_grad(dy: &[f32], w: &[f32], s: Shape) -> Vec<f32> {
    let dy = Matrix::of(dy, [s.rows, s.d_out], false);
    product(dy, Matrix::of(w, [s.d_in, s.d_out], true), None)
}

/// `∂W = xᵀ ∂y`, `[d_in, d_out]`.
pub(super) fn weight_grad(x: &[f32], dy: &[f32], s: Shape) -> Vec<f32> {
    let x = Matrix::of(x, [s.rows, s.d_in], true);
    product(x, Matrix::of(dy, [s.rows, s.d_out], false), None)
}

/// `∂b = Σ_rows ∂y`, `[d_out]`, summed row after row.
pub(super) fn bias_grad(dy: &[f32], s: Shape) -> Vec<f32> {
    let mut db = dy[..s.d_out].to_vec();
    for row in dy.chunks_exact(s.d_out).skip(1) {
        db.iter_mut().zip(row).for_each(|(db, dy)| *db += dy);
    }
    db
}
