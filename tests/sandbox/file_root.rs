//! `Builder::file_root`: `FileIo` opens only beneath the root, and what the root does not
//! confine (as its docs say); inline takes no root.

use std::path::Path;
use std::sync::Arc;

use gpuio::{Runtime, Sandbox};

use crate::common::dirs::TempDir;
use crate::common::suite_builder as builder;
use crate::common::{skip, Suite};

/// `Sandbox::FileIo` with a root: the kernel opens and creates files beneath it and
/// nothing else (`..`, absolute paths, /proc/self/mem), on io_uring's SQPOLL and the
/// fallback's thread alike; the program's own threads are not confined.
pub(crate) fn file_io_with_a_root_opens_only_beneath_it(sub: Suite) {
    let dir = TempDir::new("file-root");
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("given.txt"), "given\n").unwrap();
    std::fs::write(dir.join("outside.txt"), "outside\n").unwrap();
    let paths: Vec<(String, i32)> = vec![
        (root.join("given.txt").display().to_string(), libc::O_RDONLY),
        (
            root.join("made.txt").display().to_string(),
            libc::O_CREAT | libc::O_WRONLY,
        ),
        (dir.join("outside.txt").display().to_string(), libc::O_RDONLY),
        (root.join("../outside.txt").display().to_string(), libc::O_RDONLY),
        (
            root.join("../escaped.txt").display().to_string(),
            libc::O_CREAT | libc::O_WRONLY,
        ),
        ("/proc/self/mem".to_string(), libc::O_RDONLY),
    ];
    let open_all = |rt: &Runtime| -> Vec<i32> {
        let (p, got) = (paths.clone(), Arc::new(std::sync::Mutex::new(Vec::new())));
        let g = got.clone();
        rt.launch(1, 1, move || {
            for (path, flags) in &p {
                let r = match gpuio::device::io::open(path, *flags, 0o644) {
                    Ok(fd) => {
                        let _ = gpuio::device::io::close(fd);
                        0
                    }
                    Err(e) => e.0,
                };
                g.lock().unwrap().push(r);
            }
        })
        .unwrap();
        rt.synchronize().unwrap();
        let v = got.lock().unwrap().clone();
        v
    };
    if refuses_a_root(sub, &root) {
        return;
    }
    let rt = builder(sub).sandbox(Sandbox::FileIo).file_root(&root).build().unwrap();
    let confined = open_all(&rt);
    assert_eq!(
        confined,
        [0, 0, libc::EACCES, libc::EACCES, libc::EACCES, libc::EACCES],
        "beneath the root: read, create; outside: read, `..`, create through `..`, /proc/self/mem"
    );
    assert!(root.join("made.txt").exists() && !dir.join("escaped.txt").exists());
    // The program's own threads are not confined.
    assert_eq!(std::fs::read_to_string(dir.join("outside.txt")).unwrap(), "outside\n");
    drop(rt);
    // The control: without a root, the same kernel opens them all (as root, even /proc).
    let rt = builder(sub).sandbox(Sandbox::FileIo).build().unwrap();
    let free = open_all(&rt);
    assert_eq!(&free[..5], [0, 0, 0, 0, 0], "{free:?}");
    // A root is for FileIo only, and must exist.
    let e = builder(sub)
        .file_root(&root)
        .build()
        .err()
        .expect("PrintOnly with a root");
    assert!(e.to_string().contains("add .sandbox(Sandbox::FileIo)"), "{e}");
    let e = builder(sub)
        .sandbox(Sandbox::FileIo)
        .file_root(dir.join("nowhere"))
        .build()
        .err()
        .expect("a root that does not exist");
    assert!(e.to_string().contains("must be an existing directory"), "{e}");
}

/// Inline (the kernel threads perform the requests, and run the program's code too)
/// takes no file root: the build says so and names the way out, and the caller's case
/// ends there (true). Other configurations: false.
fn refuses_a_root(sub: Suite, root: &Path) -> bool {
    if sub.submission != gpuio::Submission::Inline {
        return false;
    }
    let e = builder(sub)
        .sandbox(Sandbox::FileIo)
        .file_root(root)
        .build()
        .err()
        .expect("Inline with a file root");
    assert!(
        e.to_string().contains("cannot confine requests to a file root") && e.to_string().contains("use auto"),
        "{e}"
    );
    // Unasked, a root makes the CPU backend submit through io_uring, whose submitting
    // thread is confined. "Unasked" includes the environment, which the builder reads:
    // where GPUIO_URING or GPUIO_SQPOLL is set (a CI leg choosing a configuration), this
    // build tests that setting, not the default, so it is skipped.
    if std::env::var_os("GPUIO_URING").is_some() || std::env::var_os("GPUIO_SQPOLL").is_some() {
        return true;
    }
    let rt = gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .sandbox(Sandbox::FileIo)
        .file_root(root);
    match rt.build() {
        Ok(rt) => assert_ne!(rt.submission(), gpuio::Submission::Inline),
        Err(e) => assert!(e.to_string().contains("needs Landlock"), "{e}"),
    }
    true
}

/// What `Builder::file_root` confines beyond the paths Landlock checks, and what it does
/// not (the docs say both): the fallback's thread refuses an `O_PATH` open (which would
/// tell whether a path outside the root exists, and what it is) and creating a file with a
/// set-id bit, with `EACCES`; io_uring, which has no executor of gpuio's, lets both through
/// (Landlock checks neither). On both, a hard link that someone else placed inside the root
/// reaches its inode outside it (a kernel cannot make one: no `LINKAT`).
pub(crate) fn a_file_root_confines_what_it_says_and_the_docs_say_the_rest(sub: Suite) {
    let dir = TempDir::new("root-leaks");
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(dir.join("outside-dir")).unwrap();
    std::fs::write(dir.join("outside.txt"), "outside\n").unwrap();
    std::fs::write(dir.join("linked.txt"), "").unwrap();
    std::fs::hard_link(dir.join("linked.txt"), root.join("link.txt")).unwrap();
    if refuses_a_root(sub, &root) {
        return;
    }
    let rt = match builder(sub).sandbox(Sandbox::FileIo).file_root(&root).build() {
        Err(e) if e.to_string().contains("needs Landlock") => {
            return skip(
                &format!(
                    "{}::a_file_root_confines_what_it_says_and_the_docs_say_the_rest",
                    sub.name()
                ),
                &e.to_string(),
            );
        }
        other => other.unwrap(),
    };
    let s = |p: &Path| p.display().to_string();
    let o_path = libc::O_PATH | libc::O_CLOEXEC;
    let attempts: Vec<(String, i32, u32)> = vec![
        (s(&dir.join("outside.txt")), o_path, 0),
        (s(&dir.join("missing")), o_path, 0),
        (s(&dir.join("outside-dir")), o_path | libc::O_DIRECTORY, 0),
        (s(&dir.join("outside.txt")), o_path | libc::O_DIRECTORY, 0),
        (
            s(&root.join("setuid")),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o4755,
        ),
        (
            s(&root.join("setgid")),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o2755,
        ),
    ];
    let link = s(&root.join("link.txt"));
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (g, a) = (got.clone(), attempts.clone());
    rt.launch(1, 1, move || {
        use gpuio::device::io;
        let mut r: Vec<i32> = a
            .iter()
            .map(|(path, flags, mode)| match io::open(path, *flags, *mode) {
                Ok(fd) => {
                    let _ = io::close(fd);
                    0
                }
                Err(e) => e.0,
            })
            .collect();
        r.push(match io::open(&link, libc::O_WRONLY | libc::O_CLOEXEC, 0) {
            Ok(fd) => {
                let w = io::pwrite(fd, b"through the link\n", 0).map_or_else(|e| e.0, |_| 0);
                let _ = io::close(fd);
                w
            }
            Err(e) => e.0,
        });
        *g.lock().unwrap() = r;
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let got = got.lock().unwrap().clone();
    let set_id = |name: &str, bit: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(root.join(name))
            .map(|m| m.permissions().mode() & bit != 0)
            .ok()
    };
    if sub.submission == gpuio::Submission::HostThread {
        assert_eq!(
            got,
            [
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                0
            ],
            "the fallback refuses O_PATH and set-id creation; the hard link reaches outside"
        );
        assert_eq!(
            (set_id("setuid", 0o4000), set_id("setgid", 0o2000)),
            (None, None),
            "created"
        );
    } else {
        // The leaks the docs state: existence (ENOENT), type (ENOTDIR), set-id files.
        assert_eq!(
            got,
            [0, libc::ENOENT, 0, libc::ENOTDIR, 0, 0, 0],
            "io_uring: Landlock checks no O_PATH open and no mode; the hard link reaches outside"
        );
        assert_eq!(set_id("setuid", 0o4000), Some(true), "S_ISUID on the created file");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("linked.txt")).unwrap(),
        "through the link\n",
        "written through the hard link inside the root"
    );
}
