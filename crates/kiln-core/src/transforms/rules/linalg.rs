//! Gradients of matrix products.

use crate::array::Array;
use crate::ops;
use kiln_base::{bail, DType, LinalgOp, Primitive, Result};

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

// ---- Factorisations and solvers -------------------------------------------------------
//
// Standard matrix-calculus rules. Ops that read one triangle of their input (triangular
// inverse and solve, Cholesky, eigh) get gradients on that triangle only: a change to an
// entry of the ignored triangle changes nothing. Cholesky and eigh read a symmetric matrix
// from one triangle, so an off-diagonal entry there stands for two entries of the matrix.

fn lin(op: LinalgOp, inputs: Vec<Array>) -> Result<Vec<Array>> {
    ops::record_all(Primitive::Linalg(op), inputs)
}

fn mm(a: &Array, b: &Array) -> Result<Array> {
    ops::matmul(a, b)
}

/// The triangle an op reads (diagonal included).
fn tri(x: &Array, upper: bool) -> Result<Array> {
    if upper {
        ops::triu(x, 0)
    } else {
        ops::tril(x, 0)
    }
}

/// The symmetric matrix a Cholesky/eigh reads from the `upper` (or lower) triangle of `x`.
fn sym_from(x: &Array, upper: bool) -> Result<Array> {
    let t = tri(x, upper)?;
    let strict = if upper { ops::triu(x, 1)? } else { ops::tril(x, -1)? };
    ops::add(&t, &mt(&strict)?)
}

/// A symmetric cotangent `s` projected onto the triangle the op read: `s_ij + s_ji` off
/// the diagonal, `s_ii` on it.
fn onto_triangle(s: &Array, upper: bool) -> Result<Array> {
    let both = ops::add(s, &mt(s)?)?;
    let diag = ops::subtract(&tri(s, upper)?, &strict(s, upper)?)?;
    ops::subtract(&tri(&both, upper)?, &diag)
}

fn strict(x: &Array, upper: bool) -> Result<Array> {
    if upper {
        ops::triu(x, 1)
    } else {
        ops::tril(x, -1)
    }
}

fn half(x: &Array) -> Result<Array> {
    ops::multiply(x, &ops::scalar(kiln_base::Scalar::Float(0.5), x.dtype())?)
}

/// The lower triangle with the diagonal halved (the Cholesky rules' Φ).
fn phi(x: &Array) -> Result<Array> {
    ops::subtract(&ops::tril(x, 0)?, &half(&ops::subtract(&ops::tril(x, 0)?, &ops::tril(x, -1)?)?)?)
}

/// The diagonal of the last two axes, as a vector.
fn diag_of(x: &Array) -> Result<Array> {
    ops::diagonal(x, 0, -2, -1)
}

/// A vector as the diagonal of a matrix (batched).
fn diag_mat(v: &Array) -> Result<Array> {
    let n = *v.shape().last().expect("a vector");
    let eye = ops::eye(n as i64, None, 0, v.dtype())?;
    ops::multiply(&ops::expand_dims(v, &[-1])?, &eye)
}

/// `F_ij = 1 / (w_j - w_i)` off the diagonal, 0 on it (eigenvector rules).
fn gaps(w: &Array) -> Result<Array> {
    let diff = ops::subtract(&ops::expand_dims(w, &[-2])?, &ops::expand_dims(w, &[-1])?)?;
    let n = *w.shape().last().expect("a vector");
    let eye = ops::astype(&ops::eye(n as i64, None, 0, DType::Bool)?, DType::Bool)?;
    let one = ops::ones(&[], w.dtype())?;
    let safe = ops::where_(&eye, &ops::broadcast_to(&one, diff.shape())?, &diff)?;
    ops::where_(&eye, &ops::zeros(&[], w.dtype())?, &ops::divide(&one, &safe)?)
}

fn neg(x: &Array) -> Result<Array> {
    ops::negative(x)
}

fn no_gradient(op: LinalgOp) -> kiln_base::Error {
    kiln_base::Error::Value {
        op: op.name(),
        msg: "Gradients are not supported for this decomposition (MLX has none either).".into(),
    }
}

pub(super) fn vjp(
    op: LinalgOp,
    primals: &[Array],
    cots: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    let a = &primals[0];
    let per_input: Vec<Array> = match op {
        LinalgOp::Inv => {
            let yt = mt(&outputs[0])?;
            vec![neg(&mm(&mm(&yt, &cots[0])?, &yt)?)?]
        }
        LinalgOp::TriInv { upper } => {
            let yt = mt(&outputs[0])?;
            vec![tri(&neg(&mm(&mm(&yt, &cots[0])?, &yt)?)?, upper)?]
        }
        LinalgOp::Solve | LinalgOp::SolveTriangular { .. } => {
            let x = &outputs[0];
            let (gb, ga) = match op {
                LinalgOp::Solve => {
                    let gb = lin(LinalgOp::Solve, vec![mt(a)?, cots[0].clone()])?.remove(0);
                    let ga = neg(&mm(&gb, &mt(x)?)?)?;
                    (gb, ga)
                }
                LinalgOp::SolveTriangular { upper } => {
                    let t = LinalgOp::SolveTriangular { upper: !upper };
                    let gb = lin(t, vec![mt(a)?, cots[0].clone()])?.remove(0);
                    let ga = tri(&neg(&mm(&gb, &mt(x)?)?)?, upper)?;
                    (gb, ga)
                }
                _ => unreachable!(),
            };
            vec![ga, gb]
        }
        LinalgOp::Det => {
            let scale = ops::multiply(&cots[0], &outputs[0])?;
            let inv_t = mt(&lin(LinalgOp::Inv, vec![a.clone()])?.remove(0))?;
            vec![ops::multiply(&inv_t, &ops::expand_dims(&scale, &[-1, -2])?)?]
        }
        LinalgOp::Slogdet => {
            let inv_t = mt(&lin(LinalgOp::Inv, vec![a.clone()])?.remove(0))?;
            vec![ops::multiply(&inv_t, &ops::expand_dims(&cots[1], &[-1, -2])?)?]
        }
        LinalgOp::Cholesky { upper } => {
            let (l, gl) = if upper {
                (mt(&outputs[0])?, mt(&cots[0])?)
            } else {
                (outputs[0].clone(), cots[0].clone())
            };
            let l_inv = lin(LinalgOp::TriInv { upper: false }, vec![l.clone()])?.remove(0);
            let p = phi(&mm(&mt(&l)?, &gl)?)?;
            let s = mm(&mm(&mt(&l_inv)?, &p)?, &l_inv)?;
            vec![onto_triangle(&half(&ops::add(&s, &mt(&s)?)?)?, false)?]
        }
        LinalgOp::Eigh { upper, vectors } => {
            let (w, v, gw, gv) = if vectors {
                (outputs[0].clone(), outputs[1].clone(), cots[0].clone(), Some(cots[1].clone()))
            } else {
                let mut full = lin(LinalgOp::Eigh { upper, vectors: true }, vec![a.clone()])?;
                let v = full.pop().expect("two outputs");
                (full.pop().expect("two outputs"), v, cots[0].clone(), None)
            };
            let mut inner = diag_mat(&gw)?;
            if let Some(gv) = gv {
                inner = ops::add(&inner, &ops::multiply(&gaps(&w)?, &mm(&mt(&v)?, &gv)?)?)?;
            }
            let m = mm(&mm(&v, &inner)?, &mt(&v)?)?;
            vec![onto_triangle(&half(&ops::add(&m, &mt(&m)?)?)?, upper)?]
        }
        LinalgOp::Qr => {
            let (q, r) = (&outputs[0], &outputs[1]);
            let nd = a.ndim();
            if a.shape()[nd - 2] < a.shape()[nd - 1] {
                bail!(
                    Value,
                    op.name(),
                    "Gradients need a matrix with at least as many rows as columns."
                );
            }
            let m = ops::subtract(&mm(r, &mt(&cots[1])?)?, &mm(&mt(&cots[0])?, q)?)?;
            let copyltu = ops::add(&ops::tril(&m, 0)?, &mt(&ops::tril(&m, -1)?)?)?;
            let c = ops::add(&cots[0], &mm(q, &copyltu)?)?;
            // c R^-T: solve R X^T = c^T.
            let xt =
                lin(LinalgOp::SolveTriangular { upper: true }, vec![r.clone(), mt(&c)?])?.remove(0);
            vec![mt(&xt)?]
        }
        LinalgOp::Svd { compute_uv } => {
            let (u, s, vt) = if compute_uv {
                (outputs[0].clone(), outputs[1].clone(), outputs[2].clone())
            } else {
                let mut full = lin(LinalgOp::Svd { compute_uv: true }, vec![a.clone()])?;
                let vt = full.pop().expect("three outputs");
                let s = full.pop().expect("three outputs");
                (full.pop().expect("three outputs"), s, vt)
            };
            let gs = if compute_uv { &cots[1] } else { &cots[0] };
            let nd = a.ndim();
            let (rows, cols) = (a.shape()[nd - 2], a.shape()[nd - 1]);
            let k = rows.min(cols);
            let all = vec![None; nd];
            let mut stop_u = all.clone();
            stop_u[nd - 1] = Some(k as i64);
            let u_k = ops::slice(&u, &all, &stop_u, &vec![1; nd])?;
            let mut stop_v = all.clone();
            stop_v[nd - 2] = Some(k as i64);
            let vt_k = ops::slice(&vt, &all, &stop_v, &vec![1; nd])?;
            let mut ga = mm(&mm(&u_k, &diag_mat(gs)?)?, &vt_k)?;
            if compute_uv {
                if rows != cols {
                    bail!(Value, op.name(), "Gradients through U and Vt need a square matrix.");
                }
                // Square: A = U S V^T with F_ij = 1 / (s_j^2 - s_i^2).
                let (gu, gvt) = (&cots[0], &cots[2]);
                let gv = mt(gvt)?;
                let f = gaps(&ops::multiply(&s, &s)?)?;
                let ut_gu = mm(&mt(&u)?, gu)?;
                let vt_gv = mm(&vt, &gv)?;
                let j = ops::multiply(&f, &ops::subtract(&ut_gu, &mt(&ut_gu)?)?)?;
                let kk = ops::multiply(&f, &ops::subtract(&vt_gv, &mt(&vt_gv)?)?)?;
                let smat = diag_mat(&s)?;
                let inner = ops::add(&mm(&j, &smat)?, &mm(&smat, &kk)?)?;
                ga = ops::add(&ga, &mm(&mm(&u, &inner)?, &vt)?)?;
            }
            vec![ga]
        }
        LinalgOp::Lu | LinalgOp::LuFactor | LinalgOp::Eig { .. } => return Err(no_gradient(op)),
    };
    Ok(argnums.iter().map(|&i| per_input[i].clone()).collect())
}

pub(super) fn jvp(
    op: LinalgOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    let a = &primals[0];
    let t = |i: usize| -> Result<Array> {
        match argnums.iter().position(|&k| k == i) {
            Some(k) => Ok(tangents[k].clone()),
            None => super::zeros_like(&primals[i]),
        }
    };
    let da = t(0)?;
    Ok(match op {
        LinalgOp::Inv => {
            let y = &outputs[0];
            vec![neg(&mm(&mm(y, &da)?, y)?)?]
        }
        LinalgOp::TriInv { upper } => {
            let y = &outputs[0];
            vec![neg(&mm(&mm(y, &tri(&da, upper)?)?, y)?)?]
        }
        LinalgOp::Solve => {
            let rhs = ops::subtract(&t(1)?, &mm(&da, &outputs[0])?)?;
            lin(LinalgOp::Solve, vec![a.clone(), rhs])?
        }
        LinalgOp::SolveTriangular { upper } => {
            let rhs = ops::subtract(&t(1)?, &mm(&tri(&da, upper)?, &outputs[0])?)?;
            lin(op, vec![a.clone(), rhs])?
        }
        LinalgOp::Det | LinalgOp::Slogdet => {
            let inv_t = mt(&lin(LinalgOp::Inv, vec![a.clone()])?.remove(0))?;
            let trace = ops::sum(&ops::multiply(&inv_t, &da)?, Some(&[-2, -1]), false)?;
            if op == LinalgOp::Det {
                vec![ops::multiply(&outputs[0], &trace)?]
            } else {
                vec![super::zeros_like(&outputs[0])?, trace]
            }
        }
        LinalgOp::Cholesky { upper } => {
            let l = if upper { mt(&outputs[0])? } else { outputs[0].clone() };
            let l_inv = lin(LinalgOp::TriInv { upper: false }, vec![l.clone()])?.remove(0);
            let ds = sym_from(&da, false)?;
            let dl = mm(&l, &phi(&mm(&mm(&l_inv, &ds)?, &mt(&l_inv)?)?)?)?;
            vec![if upper { mt(&dl)? } else { dl }]
        }
        LinalgOp::Eigh { upper, vectors } => {
            let (w, v) = if vectors {
                (outputs[0].clone(), outputs[1].clone())
            } else {
                let mut full = lin(LinalgOp::Eigh { upper, vectors: true }, vec![a.clone()])?;
                let v = full.pop().expect("two outputs");
                (full.pop().expect("two outputs"), v)
            };
            let c = mm(&mm(&mt(&v)?, &sym_from(&da, upper)?)?, &v)?;
            let mut out = vec![diag_of(&c)?];
            if vectors {
                out.push(mm(&v, &ops::multiply(&gaps(&w)?, &c)?)?);
            }
            out
        }
        LinalgOp::Qr => {
            let (q, r) = (&outputs[0], &outputs[1]);
            let nd = a.ndim();
            if a.shape()[nd - 2] < a.shape()[nd - 1] {
                bail!(
                    Value,
                    op.name(),
                    "Gradients need a matrix with at least as many rows as columns."
                );
            }
            let r_inv = lin(LinalgOp::TriInv { upper: true }, vec![r.clone()])?.remove(0);
            let da_rinv = mm(&da, &r_inv)?;
            let c = mm(&mt(q)?, &da_rinv)?;
            let low = ops::tril(&c, -1)?;
            let omega = ops::subtract(&low, &mt(&low)?)?;
            let upper_part = ops::add(&ops::triu(&c, 0)?, &mt(&low)?)?;
            let dr = mm(&upper_part, r)?;
            let dq = ops::add(&ops::subtract(&da_rinv, &mm(q, &c)?)?, &mm(q, &omega)?)?;
            vec![dq, dr]
        }
        LinalgOp::Svd { compute_uv } => {
            let (u, s, vt) = if compute_uv {
                (outputs[0].clone(), outputs[1].clone(), outputs[2].clone())
            } else {
                let mut full = lin(LinalgOp::Svd { compute_uv: true }, vec![a.clone()])?;
                let vt = full.pop().expect("three outputs");
                let s = full.pop().expect("three outputs");
                (full.pop().expect("three outputs"), s, vt)
            };
            let nd = a.ndim();
            let (rows, cols) = (a.shape()[nd - 2], a.shape()[nd - 1]);
            let k = rows.min(cols);
            let all = vec![None; nd];
            let mut stop_u = all.clone();
            stop_u[nd - 1] = Some(k as i64);
            let u_k = ops::slice(&u, &all, &stop_u, &vec![1; nd])?;
            let mut stop_v = all.clone();
            stop_v[nd - 2] = Some(k as i64);
            let vt_k = ops::slice(&vt, &all, &stop_v, &vec![1; nd])?;
            let ds = diag_of(&mm(&mm(&mt(&u_k)?, &da)?, &mt(&vt_k)?)?)?;
            if !compute_uv {
                vec![ds]
            } else {
                if rows != cols {
                    bail!(Value, op.name(), "Gradients through U and Vt need a square matrix.");
                }
                // P = U^T dA V; dU = U (F o (P S + S P^T)), dV = V (F o (S P + P^T S)).
                let p = mm(&mm(&mt(&u)?, &da)?, &mt(&vt)?)?;
                let f = gaps(&ops::multiply(&s, &s)?)?;
                let smat = diag_mat(&s)?;
                let du = mm(
                    &u,
                    &ops::multiply(&f, &ops::add(&mm(&p, &smat)?, &mm(&smat, &mt(&p)?)?)?)?,
                )?;
                let dv = mm(
                    &mt(&vt)?,
                    &ops::multiply(&f, &ops::add(&mm(&smat, &p)?, &mm(&mt(&p)?, &smat)?)?)?,
                )?;
                vec![du, ds, mt(&dv)?]
            }
        }
        LinalgOp::Lu | LinalgOp::LuFactor | LinalgOp::Eig { .. } => return Err(no_gradient(op)),
    })
}
