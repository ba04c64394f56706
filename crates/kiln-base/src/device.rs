//! Devices and streams. Every array records the stream its primitive runs on.

use std::fmt;

/// The kind of processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// A processor: kind plus index (`gpu:1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    pub kind: DeviceKind,
    pub index: u32,
}

impl Device {
    pub const CPU: Device = Device { kind: DeviceKind::Cpu, index: 0 };
    pub const GPU: Device = Device { kind: DeviceKind::Gpu, index: 0 };

    /// The default stream of this device.
    pub fn default_stream(self) -> Stream {
        Stream { device: self, index: 0 }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        };
        write!(f, "Device({kind}, {})", self.index)
    }
}

/// An ordered queue of work on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream {
    pub device: Device,
    pub index: u32,
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({}, {})", self.device, self.index)
    }
}
