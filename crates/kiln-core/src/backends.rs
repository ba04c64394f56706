//! Which `Backend` serves each kind of device. The core links no backend crate: the facade
//! (`kiln`) registers kiln-cpu's and kiln-cuda's at load, a test may register its own.
//! Registration is once per kind and for the process's life (lookups are one atomic load).

use kiln_base::{bail, Backend, Device, DeviceKind, Result};
use std::sync::OnceLock;

static CPU: OnceLock<&'static dyn Backend> = OnceLock::new();
static GPU: OnceLock<&'static dyn Backend> = OnceLock::new();

fn slot(kind: DeviceKind) -> &'static OnceLock<&'static dyn Backend> {
    match kind {
        DeviceKind::Cpu => &CPU,
        DeviceKind::Gpu => &GPU,
    }
}

/// Makes `backend` serve devices of `kind`; false (and nothing changes) when one does
/// already.
pub fn register(kind: DeviceKind, backend: &'static dyn Backend) -> bool {
    slot(kind).set(backend).is_ok()
}

/// The backend registered for `kind`, available or not.
pub fn registered(kind: DeviceKind) -> Option<&'static dyn Backend> {
    slot(kind).get().copied()
}

/// Why `device` cannot run here, or `None` when it can.
pub fn unavailable_reason(device: Device) -> Option<String> {
    let Some(backend) = registered(device.kind) else {
        let kind = match device.kind {
            DeviceKind::Cpu => "CPU",
            DeviceKind::Gpu => "GPU",
        };
        return Some(format!(
            "no {kind} backend is registered (the `kiln` crate registers kiln's backends)"
        ));
    };
    if device.index != 0 {
        return Some("no such device".into());
    }
    backend.unavailable_reason()
}

/// The backend that runs work on `device`; an error naming `op` when it cannot run here.
pub fn backend(op: &'static str, device: Device) -> Result<&'static dyn Backend> {
    match (registered(device.kind), unavailable_reason(device)) {
        (Some(b), None) => Ok(b),
        (_, why) => {
            let why = why.unwrap_or_default();
            bail!(Value, op, "{device} is not available: {why}.")
        }
    }
}

/// The GPU's backend when one is registered and available.
pub(crate) fn gpu() -> Option<&'static dyn Backend> {
    registered(DeviceKind::Gpu).filter(|b| b.unavailable_reason().is_none())
}

/// Waits until the work issued to `device` has finished.
pub fn synchronize(device: Device) -> Result<()> {
    match registered(device.kind) {
        Some(b) if b.unavailable_reason().is_none() => b.synchronize(),
        _ => Ok(()),
    }
}
