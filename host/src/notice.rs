//! Notices: what the runtime tells a person without failing (the backend it chose, the
//! fallback it took, a confinement the kernel refused, a hang it is still waiting out, a
//! drop that leaked memory under a kernel that still runs).
//!
//! Through the `log` crate, target `gpuio`, where the program installed a logger (so it can
//! route, format or filter them); else one line on stderr, as `gpuio: ...`. `GPUIO_QUIET`
//! silences both.

use std::sync::Mutex;

pub(crate) use log::Level;

/// Says `text` (which starts `gpuio: `; the prefix is left out of a log record, whose
/// target says it) at `level`.
pub(crate) fn say(level: Level, text: &str) {
    if crate::settings::is_set("GPUIO_QUIET") {
        return;
    }
    // No logger installed leaves the maximum level at `Off`.
    if log::max_level() != log::LevelFilter::Off {
        log::log!(target: "gpuio", level, "{}", text.strip_prefix("gpuio: ").unwrap_or(text));
    } else {
        eprintln!("{text}");
    }
}

/// [`say`], once per process for each text (a program that builds several runtimes sees
/// each notice once).
pub(crate) fn say_once(level: Level, text: &str) {
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == text) {
        said.push(text.to_string());
        drop(said);
        say(level, text);
    }
}
