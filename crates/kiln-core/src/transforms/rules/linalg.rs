//! Gradients of matrix products.

use crate::array::Array;
use crate::ops;
use kiln_base::Result;

/// Swaps the last two axes.
fn mt(x: &Array) -> Result<Array> {
    let n = x.ndim() as i64;
    let mut perm: Vec<i64> = (0..n).collect();
    perm.swap(x.ndim() - 1, x.ndim() - 2);
    ops::transpose(x, Some(&perm))
}

/// d(A @ B): dA = G @ B^T, dB = A^T @ G (batch dims already equal).
pub(super) fn matmul_vjp(primals: &[Array], g: &Array, argnums: &[usize]) -> Result<Vec<Array>> {
    argnums
        .iter()
        .map(|&i| match i {
            0 => ops::matmul(g, &mt(&primals[1])?),
            _ => ops::matmul(&mt(&primals[0])?, g),
        })
        .collect()
}

/// dA @ B + A @ dB.
pub(super) fn matmul_jvp(
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let mut acc: Option<Array> = None;
    for (k, &i) in argnums.iter().enumerate() {
        let term = match i {
            0 => ops::matmul(&tangents[k], &primals[1])?,
            _ => ops::matmul(&primals[0], &tangents[k])?,
        };
        acc = Some(match acc {
            Some(a) => ops::add(&a, &term)?,
            None => term,
        });
    }
    Ok(vec![acc.expect("jvp asks for at least one tangent")])
}
