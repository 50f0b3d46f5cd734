//! Forcing a GPU backend: a runtime on it, or an error saying why not.

use gpuio::{Backend, Error, Runtime};

use crate::common::{skip, watchdog};

/// Forcing a GPU backend gives a runtime on it where that GPU is present, and elsewhere
/// fails with `BackendUnavailable` naming the backend and why; never anything else.
#[test]
fn forcing_a_gpu_backend_runs_on_it_or_says_why_not() {
    const TEST: &str = "forcing_a_gpu_backend_runs_on_it_or_says_why_not";
    let _wd = watchdog(TEST, 120);
    let mut explained = 0;
    for backend in [Backend::Cuda, Backend::Hsa] {
        let name = backend.name();
        match Runtime::builder().backend(backend).build() {
            Ok(rt) => {
                assert_eq!(rt.backend(), backend, "forcing {name} gave another backend");
                std::eprintln!("the {name} backend is present here: {:?}", rt.device_name());
            }
            Err(Error::BackendUnavailable { backend: named, reason }) => {
                assert_eq!(
                    named, name,
                    "forcing {name}: the error names another backend ({reason})"
                );
                assert!(!reason.trim().is_empty(), "forcing {name}: no reason given");
                std::eprintln!("forcing {name}: unavailable: {reason}");
                explained += 1;
            }
            Err(e) => panic!("forcing {name}: expected a runtime or BackendUnavailable, got: {e}"),
        }
    }
    if explained == 0 {
        skip(
            TEST,
            "every GPU backend is available here, so no BackendUnavailable error was checked",
        );
    }
}
