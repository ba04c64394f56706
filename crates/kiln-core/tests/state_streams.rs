//! The per-thread random state key (get/set, splitting, seeding) and stream bookkeeping.

mod common;

use kiln_core::ops::{self, random};
use kiln_core::{device, Array, DType, Device};

fn key_values(k: &Array) -> Vec<u32> {
    k.to_vec::<u32>().unwrap()
}

#[test]
fn set_key_reproduces_draws_and_next_key_splits_it() {
    let k = random::key(9).unwrap();
    random::set_current_key(&k).unwrap();
    let a = random::uniform(0.0, 1.0, &[4], DType::F32, None).unwrap().to_vec::<f32>().unwrap();
    random::set_current_key(&k).unwrap();
    let b = random::uniform(0.0, 1.0, &[4], DType::F32, None).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    // The state moved to half 0 of split(k); the draw used half 1.
    let pair = random::split(&k, 2).unwrap();
    let keep = ops::index(&pair, &[ops::IndexItem::Int(0)]).unwrap();
    assert_eq!(key_values(&random::current_key().unwrap()), key_values(&keep));
}

#[test]
fn bad_keys_are_rejected() {
    let bad = ops::zeros(&[3], DType::U32).unwrap();
    assert!(random::set_current_key(&bad).is_err());
    let bad = ops::zeros(&[2], DType::I32).unwrap();
    assert!(random::set_current_key(&bad).is_err());
}

#[test]
fn threads_have_their_own_key() {
    random::set_current_key(&random::key(1).unwrap()).unwrap();
    let mine = key_values(&random::current_key().unwrap());
    std::thread::spawn(|| {
        random::set_current_key(&random::key(2).unwrap()).unwrap();
        random::next_key().unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(key_values(&random::current_key().unwrap()), mine);
}

#[test]
fn streams_are_fresh_and_per_thread_defaults_reset() {
    let a = device::new_stream(Device::CPU).unwrap();
    let b = device::new_stream(Device::CPU).unwrap();
    assert_ne!(a, b);
    assert!(device::new_stream(Device::GPU).is_err());
    assert!(device::default_stream_of(Device::GPU).is_err());
    device::set_default_stream(a).unwrap();
    assert_eq!(device::default_stream_of(Device::CPU).unwrap(), a);
    assert_eq!(device::default_stream(), a);
    // Another thread does not see this thread's default (its own is stream 0 on the main
    // thread, a new stream elsewhere: which thread is main depends on the test order here).
    let other =
        std::thread::spawn(|| device::default_stream_of(Device::CPU).unwrap()).join().unwrap();
    assert_ne!(other, a);
    let id = device::new_thread_local_stream(Device::CPU).unwrap();
    let s = device::resolve_thread_local(Device::CPU, id).unwrap();
    assert_eq!(device::resolve_thread_local(Device::CPU, id).unwrap(), s);
    device::clear_streams();
    let home = device::default_stream_of(Device::CPU).unwrap();
    assert_ne!(home, a);
    assert_eq!(device::default_stream_of(Device::CPU).unwrap(), home);
    assert_ne!(device::resolve_thread_local(Device::CPU, id).unwrap(), s);
}
