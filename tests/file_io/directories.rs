//! The file system beyond reads and writes: `create_dir`, `rename`, `remove_file`,
//! `remove_dir` and `set_len` as std's; `File::len` and `SeekFrom::End`, and what `len`
//! costs; `create_dir_all`, nested, raced, and over symlinks, FIFOs and files.

use std::path::Path;
use std::sync::{Arc, Mutex};

use gpuio::device::fs::{File, OpenOptions};
use gpuio::device::io::Errno;
use gpuio::Runtime;

use crate::common::dirs::TempDir;
use crate::common::{watchdog, Suite};
use crate::runtime;

/// `fs::create_dir`, `rename`, `remove_file`, `remove_dir` and `File::set_len` from a kernel,
/// on both submission paths: each does what std's does to the host's file system, and each
/// failure names its errno and path. `set_len` goes through io_uring's `FTRUNCATE`, which
/// Linux has from 6.9 (this machine's kernel is newer; the fallback calls `ftruncate`).
pub(crate) fn directories_renames_removals_and_lengths_as_std_has_them(sub: Suite) {
    let _w = watchdog("directories_renames_removals_and_lengths_as_std_has_them", 60);
    use gpuio::device::fs;
    let dir = TempDir::new("dirs");
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let p = |name: &str| format!("{d}/{name}");
        out.push(format!("mkdir {:?}", fs::create_dir(&p("sub"))));
        out.push(format!(
            "mkdir again {:?}",
            fs::create_dir(&p("sub")).map_err(|e| e.errno)
        ));
        let mut f = fs::File::create(&p("sub/a.tmp")).unwrap();
        f.write_all(b"0123456789").unwrap();
        out.push(format!("shorten {:?}", f.set_len(4)));
        out.push(format!("extend {:?}", f.set_len(6)));
        drop(f);
        out.push(format!("rename {:?}", fs::rename(&p("sub/a.tmp"), &p("sub/a"))));
        out.push(format!(
            "rename to empty {:?}",
            fs::rename(&p("sub/a"), "").map_err(|e| e.errno)
        ));
        out.push(format!(
            "rmdir full {:?}",
            fs::remove_dir(&p("sub")).map_err(|e| e.errno)
        ));
        out.push(format!(
            "rm dir as file {:?}",
            fs::remove_file(&p("sub")).map_err(|e| e.errno)
        ));
        out.push(format!("rm missing: {}", fs::remove_file(&p("sub/none")).unwrap_err()));
        out.push(format!(
            "rename missing {:?}",
            fs::rename(&p("none"), &p("x")).map_err(|e| e.errno)
        ));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let at = |name: &str| dir.join(name);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "mkdir Ok(())".to_string(),
            format!("mkdir again Err({:?})", Errno::EEXIST),
            "shorten Ok(())".to_string(),
            "extend Ok(())".to_string(),
            "rename Ok(())".to_string(),
            format!("rename to empty Err({:?})", Errno::ENOENT),
            format!("rmdir full Err({:?})", Errno(libc::ENOTEMPTY)),
            format!("rm dir as file Err({:?})", Errno(libc::EISDIR)),
            format!(
                "rm missing: No such file or directory (os error 2): {:?}",
                dir.str("sub/none")
            ),
            format!("rename missing Err({:?})", Errno::ENOENT),
        ]
    );
    assert!(!at("sub/a.tmp").exists());
    assert_eq!(std::fs::read(at("sub/a")).unwrap(), b"0123\0\0");
    // Then removed, from a kernel, leaving nothing.
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        out.clear();
        out.push(format!("{:?}", fs::remove_file(&format!("{d}/sub/a"))));
        out.push(format!("{:?}", fs::remove_dir(&format!("{d}/sub"))));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), ["Ok(())", "Ok(())"]);
    assert!(!at("sub").exists());
}

/// `File::len` (found by reads, no `STATX`), `SeekFrom::End`, and `fs::create_dir_all`, as
/// std's: lengths around the 64-byte read the search makes, a write-only file refused with
/// `EBADF`; directories nested, made again, under a file, and by 16 threads at once.
pub(crate) fn a_files_length_its_end_and_nested_directories(sub: Suite) {
    let _w = watchdog("a_files_length_its_end_and_nested_directories", 60);
    use gpuio::device::fs::{self, SeekFrom};
    let dir = TempDir::new("lengths");
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    let lengths = [0usize, 1, 10, 63, 64, 65, 128, 192, 256, 512, 1000, 4097, (1 << 20) + 3];
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let p = |name: &str| format!("{d}/{name}");
        for len in lengths {
            std::fs::write(p(&format!("len{len}")), vec![7u8; len]).unwrap();
            let f = File::open(&p(&format!("len{len}"))).unwrap();
            out.push(format!("{len}: {:?} {:?}", f.len(), f.is_empty()));
        }
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&p("end"))
            .unwrap();
        f.write_all(b"0123456789").unwrap();
        out.push(format!("end {:?}", f.seek(SeekFrom::End(0))));
        out.push(format!("end-3 {:?}", f.seek(SeekFrom::End(-3))));
        let mut three = [0u8; 3];
        f.read_exact(&mut three).unwrap();
        out.push(format!("read {:?}", std::str::from_utf8(&three).unwrap()));
        out.push(format!("end+5 {:?}", f.seek(SeekFrom::End(5))));
        f.write_all(b"!").unwrap();
        out.push(format!("grown {:?}", f.len()));
        out.push(format!("end-17 {:?}", f.seek(SeekFrom::End(-17))));
        let w = File::create(&p("write-only")).unwrap();
        out.push(format!("write-only {:?}", w.len()));
        out.push(format!("nested {:?}", fs::create_dir_all(&p("a/b//c/"))));
        out.push(format!("again {:?}", fs::create_dir_all(&p("a/b/c"))));
        out.push(format!("a parent {:?}", fs::create_dir_all(&p("a"))));
        out.push(format!(
            "a file {:?}",
            fs::create_dir_all(&p("end")).map_err(|e| e.errno)
        ));
        out.push(format!(
            "under a file {:?}",
            fs::create_dir_all(&p("end/x")).map_err(|e| e.errno)
        ));
        out.push(format!("empty {:?}", fs::create_dir_all("")));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let mut want: Vec<String> = lengths
        .iter()
        .map(|l| format!("{l}: Ok({l}) Ok({})", *l == 0))
        .collect();
    want.extend([
        "end Ok(10)".to_string(),
        "end-3 Ok(7)".to_string(),
        "read \"789\"".to_string(),
        "end+5 Ok(15)".to_string(),
        "grown Ok(16)".to_string(),
        format!("end-17 Err({:?})", Errno::EINVAL),
        format!("write-only Err({:?})", Errno::EBADF),
        "nested Ok(())".to_string(),
        "again Ok(())".to_string(),
        "a parent Ok(())".to_string(),
        format!("a file Err({:?})", Errno::EEXIST),
        format!("under a file Err({:?})", Errno(libc::ENOTDIR)),
        "empty Ok(())".to_string(),
    ]);
    assert_eq!(*seen.lock().unwrap(), want);
    assert!(dir.join("a/b/c").is_dir());
    let mut grown = std::fs::read(dir.join("end")).unwrap();
    assert_eq!(grown.split_off(10), b"\0\0\0\0\0!");
    // Sixteen threads make the same directories at once: each finds the others' or makes its own.
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    s.lock().unwrap().clear();
    rt.launch(4, 4, move || {
        let r = fs::create_dir_all(&format!("{d}/race/x/y/z")).map_err(|e| e.to_string());
        s.lock().unwrap().push(format!("{r:?}"));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec!["Ok(())"; 16]);
    assert!(dir.join("race/x/y/z").is_dir());
}

/// `File::len`'s cost and ends, as its docs state them: 1 request under 64 bytes, at most
/// 2 log2(len / 64) + 4 for a longer file (1 GiB: 48 here) (counted by the runtime's `Stats`, less what an open
/// and a close take); on a file another thread appends to, it ends, each answer between the
/// lengths before and after it and none smaller than the one before; on a pipe (which it
/// is not for), the same on every path: it takes the bytes waiting there.
pub(crate) fn a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe(sub: Suite) {
    let _w = watchdog(
        "a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe",
        60,
    );
    let dir = TempDir::new("len-cost");
    let rt = runtime(sub, 16 << 10, 4096);
    let requests = |rt: &Runtime| {
        let s = rt.stats();
        s.sqes as u64 + s.solo_requests
    };
    // What a kernel that opens a file and lets it close takes, without `len`.
    let path = dir.str("base");
    std::fs::write(&path, b"x").unwrap();
    let before = requests(&rt);
    let p = path.clone();
    rt.launch(1, 1, move || drop(File::open(&p).unwrap())).unwrap();
    rt.synchronize().unwrap();
    let open_close = requests(&rt) - before;
    for len in [0u64, 1, 63, 64, 65, 200, 4096, 1 << 20, 1 << 30] {
        let path = dir.str(&format!("len{len}"));
        // A sparse file: its holes read as zeros, as its bytes would.
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let before = requests(&rt);
        let s = seen.clone();
        rt.launch(1, 1, move || {
            *s.lock().unwrap() = Some(File::open(&path).unwrap().len())
        })
        .unwrap();
        rt.synchronize().unwrap();
        let took = requests(&rt) - before - open_close;
        assert_eq!(*seen.lock().unwrap(), Some(Ok(len)));
        let bound = if len < 64 { 1 } else { 2 * (len / 64).ilog2() as u64 + 4 };
        assert!(
            took <= bound && (len >= 64 || took == 1),
            "len() of a {len}-byte file took {took} requests, its docs allow {bound}"
        );
    }
    // A file another thread appends to while a kernel asks its length 30 times.
    let grow = dir.str("growing");
    std::fs::write(&grow, vec![b'g'; 100]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (grow, stop) = (grow.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&grow).unwrap();
            // At most 4 MiB, a write every 20 us: growing while the kernel asks, without
            // taking a core from it or filling the disk.
            for _ in 0..(4 << 20) / 37 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                f.write_all(&[b'g'; 37]).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        })
    };
    let answers = Arc::new(Mutex::new(Vec::new()));
    let (g, a) = (grow.clone(), answers.clone());
    let first = std::fs::metadata(&grow).unwrap().len();
    rt.launch(1, 1, move || {
        let f = File::open(&g).unwrap();
        for _ in 0..30 {
            let len = f.len();
            a.lock().unwrap().push(len);
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    appender.join().unwrap();
    let last = std::fs::metadata(&grow).unwrap().len();
    let answers: Vec<u64> = answers.lock().unwrap().iter().map(|r| r.unwrap()).collect();
    assert_eq!(answers.len(), 30);
    assert!(
        answers.windows(2).all(|w| w[0] <= w[1]) && answers[0] >= first && answers[29] <= last,
        "lengths of a growing file ({first} before, {last} after): {answers:?}"
    );
    // A pipe, which `len` is not for, as its docs say: on every path a read at an offset
    // reads on, so it takes the bytes waiting there and returns their count.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[1] is the pipe's write end, open, and `b"queued"` 6 readable bytes.
    assert_eq!(unsafe { libc::write(fds[1], b"queued".as_ptr().cast(), 6) }, 6);
    let seen = Arc::new(Mutex::new(None));
    let (s, read_end) = (seen.clone(), fds[0]);
    rt.launch(1, 1, move || {
        // SAFETY: the test keeps the pipe's read end open until after the synchronize, and
        // `into_raw_fd` hands it back unclosed.
        let f = unsafe { File::from_raw_fd(read_end) };
        *s.lock().unwrap() = Some(f.len());
        let _ = f.into_raw_fd();
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(6)));
    let mut back = [0u8; 16];
    // SAFETY: both ends are open; `back` has room for 16 bytes; nothing uses the ends after
    // their close. With the write end closed, the read ends at once: 0 where `len` took all.
    let n = unsafe {
        libc::close(fds[1]);
        let n = libc::read(fds[0], back.as_mut_ptr().cast(), back.len());
        libc::close(fds[0]);
        n
    };
    assert_eq!(n, 0, "the pipe still held {:?}", &back[..n.max(0) as usize]);
}

/// `fs::create_dir_all` where the path meets symlinks (to a directory, to a file, dangling),
/// a FIFO or a file: the same `Ok` or errno as std's on a twin tree. And the requests its
/// docs state: one for a directory whose parent exists, two more per missing parent, one
/// more where the path exists.
pub(crate) fn create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts(sub: Suite) {
    let _w = watchdog(
        "create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts",
        60,
    );
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("dir-all");
    let make = |root: &Path| {
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::fs::write(root.join("file"), b"f").unwrap();
        symlink(root.join("real"), root.join("to-dir")).unwrap();
        symlink(root.join("file"), root.join("to-file")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    };
    let (std_root, dev_root) = (dir.path().join("std"), dir.path().join("dev"));
    make(&std_root);
    make(&dev_root);
    let paths = [
        "to-dir",
        "to-dir/x/y",
        "to-dir/inner",
        "to-file",
        "to-file/x",
        "dangling",
        "dangling/x",
        "fifo",
        "fifo/x/y",
        "file",
        "real/../real/z",
    ];
    let by_std: Vec<String> = paths
        .iter()
        .map(|p| match std::fs::create_dir_all(std_root.join(p)) {
            Ok(()) => "Ok".to_string(),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap()),
        })
        .collect();
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (root, s) = (dev_root.to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        for p in paths {
            let r = match gpuio::device::fs::create_dir_all(&format!("{root}/{p}")) {
                Ok(()) => "Ok".to_string(),
                Err(e) => format!("errno {}", e.errno.0),
            };
            s.lock().unwrap().push(r);
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    let by_gpuio = seen.lock().unwrap().clone();
    for ((p, a), b) in paths.iter().zip(&by_std).zip(&by_gpuio) {
        assert_eq!(a, b, "create_dir_all({p:?}): std {a}, gpuio {b}");
    }
    for p in ["to-dir/x/y", "real/z"] {
        assert!(dev_root.join(p).is_dir(), "{p} is no directory");
    }
    // Requests, less nothing: a kernel that makes no request takes none.
    let requests = |rt: &Runtime| {
        let s = rt.stats();
        s.sqes as u64 + s.solo_requests
    };
    for (path, want) in [("new", 1), ("new", 2), ("a/b/c", 5), ("to-dir/x/y/z/w", 3)] {
        let before = requests(&rt);
        let p = format!("{}/{path}", dev_root.to_str().unwrap());
        rt.launch(1, 1, move || gpuio::device::fs::create_dir_all(&p).unwrap())
            .unwrap();
        rt.synchronize().unwrap();
        assert_eq!(requests(&rt) - before, want, "create_dir_all({path:?})'s requests");
    }
}
