//! One line on a terminal while kernels build: a compiled function's first call can build
//! many (seconds with a slow compiler or NVRTC). Once builds have been in flight for more
//! than a second and stderr is a terminal, a line counts them and is rewritten in place
//! until the last one finishes, ending with the total time. `KILN_PROGRESS=0` silences
//! it, `KILN_PROGRESS=1` shows it on any stderr.

use std::io::{IsTerminal, Write};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Builds in flight for this long before the line appears.
const QUIET_FOR: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(250);

#[derive(Default)]
struct State {
    in_flight: usize,
    done: usize,
    since: Option<Instant>,
    shown: bool,
    watching: bool,
}

static STATE: Mutex<State> =
    Mutex::new(State { in_flight: 0, done: 0, since: None, shown: false, watching: false });

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var("KILN_PROGRESS").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => std::io::stderr().is_terminal(),
    })
}

/// Counts `kernels` builds as in flight until the guard drops.
pub struct Building(usize);

/// Marks `kernels` builds as started (a parallel batch passes its size).
pub fn building(kernels: usize) -> Building {
    if kernels == 0 || !enabled() {
        return Building(0);
    }
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if s.in_flight == 0 {
        s.done = 0;
        s.since = Some(Instant::now());
        s.shown = false;
    }
    s.in_flight += kernels;
    if !s.watching {
        s.watching = true;
        std::thread::spawn(watch);
    }
    Building(kernels)
}

impl Drop for Building {
    fn drop(&mut self) {
        if self.0 == 0 {
            return;
        }
        let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
        s.in_flight -= self.0;
        s.done += self.0;
        if s.in_flight == 0 && s.shown {
            let secs = s.since.map_or(0.0, |t| t.elapsed().as_secs_f64());
            let n = s.done;
            let plural = if n == 1 { "" } else { "s" };
            line(&format!("kiln: built {n} kernel{plural} in {secs:.1} s (cached on disk)"), true);
            s.shown = false;
        }
    }
}

/// Rewrites the line (`\r`, cleared to its end); `last` ends it.
fn line(text: &str, last: bool) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r{text}\x1b[K{}", if last { "\n" } else { "" });
    let _ = err.flush();
}

/// The watcher thread: shows and updates the line while builds are in flight.
fn watch() {
    loop {
        std::thread::sleep(TICK);
        let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
        if s.in_flight == 0 {
            s.watching = false;
            return;
        }
        let elapsed = s.since.map_or(Duration::ZERO, |t| t.elapsed());
        if elapsed >= QUIET_FOR {
            s.shown = true;
            let total = s.done + s.in_flight;
            line(
                &format!(
                    "kiln: building kernels for a first call: {} of {total} done ({:.0} s)",
                    s.done,
                    elapsed.as_secs_f64()
                ),
                false,
            );
        }
    }
}
