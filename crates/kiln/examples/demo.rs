//! Builds a lazy graph, evaluates it, and prints what happened.
//! Run: `cargo run --release -p kiln --example demo`

use kiln::{ops, DType, Scalar};

fn main() -> kiln::Result<()> {
    let n = 1 << 20;
    let x = kiln::random::normal(&[n], DType::F32, 0.0, 1.0, Some(&kiln::random::key(0)?))?;
    // gelu(x) = x * (1 + erf(x / sqrt(2))) / 2, recorded, not computed.
    let half = ops::scalar(Scalar::Float(0.5), DType::F32)?;
    let one = ops::scalar(Scalar::Float(1.0), DType::F32)?;
    let inv_sqrt2 = ops::scalar(Scalar::Float(std::f64::consts::FRAC_1_SQRT_2), DType::F32)?;
    let inner = ops::add(&one, &ops::erf(&ops::multiply(&x, &inv_sqrt2)?)?)?;
    let y = ops::multiply(&ops::multiply(&x, &inner)?, &half)?;
    let m = ops::mean(&y, None, false)?;
    println!("built a lazy graph for mean(gelu(x)) over {n} normal samples");
    println!("  evaluated yet? x: {}, y: {}", x.is_evaluated(), y.is_evaluated());
    let (calls, mem) = (kiln::eval::calls_run(), kiln::active_memory());
    kiln::eval(&[m.clone(), y.clone()])?;
    println!(
        "eval ran {} primitive calls; memory held by arrays grew by {} KiB (peak {} KiB)",
        kiln::eval::calls_run() - calls,
        (kiln::active_memory() - mem) / 1024,
        kiln::peak_memory() / 1024
    );
    println!("  mean(gelu(x)) = {:.5} (about 0.28209 for a standard normal)", m.item::<f32>()?);
    println!("  y[0..4] = {:?}", &y.to_vec::<f32>()?[..4]);
    Ok(())
}
