//! Notices reach the program's logger (the `log` crate, target `gpuio`) where it installed
//! one, and stderr only where it did not: here one is installed, and the fallback's notice
//! (io_uring refused at setup, simulated) must arrive as a record, once per process.

use std::sync::Mutex;

use gpuio::{Backend, Runtime, Submission};

static RECORDS: Mutex<Vec<(log::Level, String, String)>> = Mutex::new(Vec::new());

struct Keep;

impl log::Log for Keep {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        RECORDS
            .lock()
            .unwrap()
            .push((r.level(), r.target().to_string(), r.args().to_string()));
    }
    fn flush(&self) {}
}

#[test]
fn notices_go_to_the_programs_logger_once() {
    log::set_logger(&Keep).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let build = || {
        Runtime::builder()
            .backend(Backend::Cpu)
            .submission(Submission::Auto)
            .simulate_uring_setup_error(libc::EPERM)
            .build()
            .unwrap()
    };
    let rt = build();
    assert_eq!(rt.submission(), Submission::HostThread);
    drop(rt);
    drop(build()); // the same notice, not said again
    let records = RECORDS.lock().unwrap().clone();
    let fallback: Vec<_> = records.iter().filter(|r| r.2.contains("host thread")).collect();
    assert_eq!(fallback.len(), 1, "{records:?}");
    let (level, target, text) = fallback[0];
    assert_eq!((*level, target.as_str()), (log::Level::Info, "gpuio"));
    assert!(!text.starts_with("gpuio: "), "the target says it: {text}");
}
