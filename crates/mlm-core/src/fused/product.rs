//! The matrix product the kernels share: gemm over row-major `f32` matrices in slices, read
//! as they are or transposed, into a row-major destination that is overwritten or
//! accumulated onto.

/// A row-major matrix in a slice, read as its transpose when `transposed`.
#[derive(Clone, Copy)]
pub(super) struct Matrix<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    transposed: bool,
}

impl<'a> Matrix<'a> {
    /// `data` as rows of `cols` values.
    pub(super) fn new(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            rows: data.len() / cols.max(1),
            cols,
            transposed: false,
        }
    }

    /// The same matrix read transposed.
    pub(super) fn t(self) -> Self {
        Self {
            transposed: !self.transposed,
            ..self
        }
    }

    /// `[rows, cols]` as read, and the strides `(row, column)` of that reading.
    fn read(&self) -> ([usize; 2], [isize; 2]) {
        let (r, c) = (self.rows, self.cols as isize);
        if self.transposed {
            ([self.cols, r], [1, c])
        } else {
            ([r, self.cols], [c, 1])
        }
    }
}

/// From this many multiply-adds a product runs on rayon's pool, as burn-flex's own do.
const PARALLEL_MACS: usize = 192 * 192 * 192;

/// `dst = lhs · rhs`, or `dst += lhs · rhs` when `accumulate`; `dst` row-major.
///
/// # Panics
/// If the shapes do not chain or `dst` is not `lhs.rows × rhs.cols`.
pub(super) fn product(dst: &mut [f32], lhs: Matrix, rhs: Matrix, accumulate: bool) {
    let ([m, _], [_, n]) = (lhs.read().0, rhs.read().0);
    assert!(
        dst.len() == m * n,
        "a product of {m} × {n} into {}",
        dst.len()
    );
    // SAFETY: `dst` holds the m × n values, initialised.
    unsafe { product_into(dst.as_mut_ptr(), lhs, rhs, accumulate) }
}

/// `lhs · rhs` into a new row-major buffer that gemm writes whole: never zeroed first.
pub(super) fn product_new(lhs: Matrix, rhs: Matrix) -> Vec<f32> {
    let mut out = Vec::new();
    product_extend(&mut out, lhs, rhs);
    out
}

/// Appends the row-major `lhs · rhs` to `dst`, written by gemm into `dst`'s spare room:
/// never zeroed first.
pub(super) fn product_extend(dst: &mut Vec<f32>, lhs: Matrix, rhs: Matrix) {
    let ([m, k], [_, n]) = (lhs.read().0, rhs.read().0);
    if k == 0 {
        // gemm writes nothing when the inner dimension is empty
        dst.resize(dst.len() + m * n, 0.0);
        return;
    }
    dst.reserve(m * n);
    // SAFETY: the spare room holds the m × n values, which gemm writes (not reads) before
    // `set_len`.
    unsafe {
        product_into(dst.as_mut_ptr().add(dst.len()), lhs, rhs, false);
        dst.set_len(dst.len() + m * n);
    }
}

/// `dst (+)= lhs · rhs` at a raw destination.
///
/// # Safety
/// `dst` must hold `lhs.rows × rhs.cols` values (initialised when `accumulate`) that no one
/// else touches during the call.
///
/// # Panics
/// If the shapes do not chain.
unsafe fn product_into(dst: *mut f32, lhs: Matrix, rhs: Matrix, accumulate: bool) {
    let ([m, k], [lhs_rs, lhs_cs]) = lhs.read();
    let ([k2, n], [rhs_rs, rhs_cs]) = rhs.read();
    assert!(k == k2, "product of [{m}, {k}] and [{k2}, {n}]");
    let parallelism = match m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MACS {
        true => gemm::Parallelism::Rayon(0),
        false => gemm::Parallelism::None,
    };
    // SAFETY: `Matrix::new` keeps every view inside its slice; the caller vouches for `dst`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs_cs,
            lhs_rs,
            rhs.data.as_ptr(),
            rhs_cs,
            rhs_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}
