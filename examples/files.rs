//! Files from device code: 8 threads each create a file, write a line, fsync it and read it
//! back, on the CPU backend (docs/USAGE.md, "Files from device code").
//!
//! ```sh
//! cargo run --release --example files
//! ```

use gpuio::device::fs::OpenOptions;

fn main() -> Result<(), gpuio::Error> {
    let rt = gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .sandbox(gpuio::Sandbox::FileIo) // the default sandbox allows prints only
        .build()?;
    let dir = std::env::temp_dir().join(format!("gpuio-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap().to_string();
    rt.launch(1, 8, move || {
        let t = gpuio::device::global_thread_idx();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&format!("{d}/t{t}"))
            .expect("open");
        f.write_all_at(b"written by a GPU thread\n", 0).expect("write");
        f.sync_all().expect("fsync");
        let mut back = [0u8; 24];
        f.read_exact_at(&mut back, 0).expect("read"); // EOF and errors come with counts
        assert_eq!(&back, b"written by a GPU thread\n");
    })?; // dropping `f` closes it
    rt.synchronize()?;
    let files = std::fs::read_dir(&dir).unwrap().count();
    std::fs::remove_dir_all(dir).unwrap();
    println!("files: 8 threads wrote, synced and read back {files} files");
    Ok(())
}
