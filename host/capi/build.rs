//! Writes `gpuio.pc` (from `gpuio.pc.in`) next to the libraries cargo builds:
//! `target/<profile>/gpuio.pc`, pointing at that directory and at `include/`.
//!
//! Cargo gives build scripts only `OUT_DIR` (`target/<profile>/build/gpuio-capi-*/out`);
//! the profile directory, where `libgpuio.so` and `libgpuio.a` land, is three levels up.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=gpuio.pc.in");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let Some(libdir) = out_dir.ancestors().nth(3) else {
        println!(
            "cargo:warning=gpuio-capi: unexpected OUT_DIR {}, no gpuio.pc written",
            out_dir.display()
        );
        return;
    };
    let template = std::fs::read_to_string(manifest.join("gpuio.pc.in")).expect("read gpuio.pc.in");
    let pc = template
        .replace("@LIBDIR@", &libdir.display().to_string())
        .replace("@INCLUDEDIR@", &manifest.join("include").display().to_string())
        .replace(
            "@VERSION@",
            &std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION"),
        );
    let path = libdir.join("gpuio.pc");
    // Written again if deleted. (Cargo reruns a script when a listed file is missing or
    // newer than its last run: after the run that writes it, one more run finds the
    // content unchanged, writes nothing, and from then on the script is fresh.)
    println!("cargo:rerun-if-changed={}", path.display());
    // Rewritten only when it changed: tools watching the file see no spurious updates.
    if std::fs::read_to_string(&path).ok().as_deref() != Some(pc.as_str()) {
        if let Err(e) = std::fs::write(&path, pc) {
            println!("cargo:warning=gpuio-capi: cannot write {}: {e}", path.display());
        }
    }
}
