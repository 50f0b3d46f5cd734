//! std's habits on a device `File`: a cursor, `write!`/`writeln!`, a `BufWriter`, code
//! generic over the io traits, errors as std shows them, and `dbg!`.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gpuio::device::fs::{File, OpenOptions};
use gpuio::device::io::Errno;
use gpuio::{Backend, Runtime, Sandbox};

use crate::common::dirs::{create, TempDir};
use crate::common::{watchdog, Suite};

/// std's habits on a device `File`: a cursor (`write_all`, `read`, `read_exact`, `seek`,
/// `stream_position`), `write!`/`writeln!` (one request per 256 formatted bytes), a
/// `BufWriter` that gathers a loop of `writeln!` into a few writes, and errors as std shows
/// them.
pub(crate) fn std_habits_cursor_write_macros_and_a_buffered_writer(sub: Suite) {
    let _w = watchdog("std_habits_cursor_write_macros_and_a_buffered_writer", 60);
    // Both `Write` traits in scope, as a kernel that writes generic code has them: `write!`
    // takes each type's own `write_fmt` (the traits unused, which is the point: were one
    // trait's `write_fmt` chosen, with both in scope `write!` here would not compile).
    #[allow(unused_imports)]
    use core::fmt::Write as _;
    use gpuio::device::fs::{BufWriter, SeekFrom};
    #[allow(unused_imports)]
    use gpuio::device::io::Write as _;
    let dir = TempDir::new("habits");
    let (a, b) = (dir.str("a.txt"), dir.str("b.txt"));
    // dbg! writes to the runtime's stderr: a file here.
    let err_path = dir.str("stderr.txt");
    let err = create(Path::new(&err_path));
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(sub.submission)
        .sqpoll(sub.sqpoll)
        .rings(sub.rings)
        .sandbox(Sandbox::FileIo)
        .stderr_fd(err.as_raw_fd())
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (pa, pb, s) = (a.clone(), b.clone(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&pa)
            .unwrap();
        writeln!(f, "x = {}, y = {:?}", 42, "two").unwrap();
        f.write_all(b"raw\n").unwrap();
        // A text longer than the formatting chunk: several requests, one text.
        writeln!(f, "{}", "z".repeat(600)).unwrap();
        out.push(format!("pos {}", f.stream_position()));
        out.push(format!("seek {:?}", f.seek(SeekFrom::Start(4))));
        let mut two = [0u8; 2];
        f.read_exact(&mut two).unwrap();
        out.push(format!(
            "read {:?} pos {}",
            std::str::from_utf8(&two).unwrap(),
            f.stream_position()
        ));
        out.push(format!("back {:?}", f.seek(SeekFrom::Current(-6))));
        let mut all = [0u8; 13];
        out.push(format!("read {:?}", f.read(&mut all)));
        out.push(format!("end {:?}", f.seek(SeekFrom::End(0))));
        out.push(format!("before 0 {:?}", f.seek(SeekFrom::Current(-1_000))));
        let mut g = File::create(&pb).unwrap();
        let mut w = BufWriter::<4096>::new(&mut g);
        for i in 0..100 {
            writeln!(w, "{i} {}", i * i).unwrap();
        }
        // Code generic over the io traits takes the buffered writer too.
        out.push(format!("generic {:?}", end_through_io_write(&mut w)));
        out.push(format!("flush {:?}", w.flush()));
        drop(w);
        // Through the trait, a buffered writer's `write` returns the error its write out
        // met (a read-only file: EBADF).
        let mut r = File::open(&pa).unwrap();
        let mut w = BufWriter::<16>::new(&mut r);
        let refused = gpuio::device::io::Write::write(&mut w, &[b'x'; 20]);
        out.push(format!("read-only {:?}", refused.map_err(|e| e.errno())));
        drop(w);
        let missing = File::open("/nonexistent/gpuio-habits").unwrap_err();
        out.push(format!("missing: {missing}"));
        let long = "d/".repeat(150);
        out.push(format!("long: {:?}", File::open(&long).unwrap_err()));
        out.push(format!("dbg {}", gpuio::device::dbg!(6 * 7)));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let seen = seen.lock().unwrap().clone();
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(text, format!("x = 42, y = \"two\"\nraw\n{}\n", "z".repeat(600)));
    assert_eq!(
        seen,
        [
            format!("pos {}", text.len()),
            "seek Ok(4)".to_string(),
            "read \"42\" pos 6".to_string(),
            "back Ok(0)".to_string(),
            "read Ok(13)".to_string(),
            format!("end Ok({})", text.len()),
            format!("before 0 Err({:?})", Errno::EINVAL),
            "generic Ok(())".to_string(),
            "flush Ok(())".to_string(),
            format!("read-only Err({:?})", Some(Errno::EBADF)),
            "missing: No such file or directory (os error 2): \"/nonexistent/gpuio-habits\"".to_string(),
            format!(
                "long: No such file or directory (os error 2): {:?}...",
                "d/".repeat(100)
            ),
            "dbg 42".to_string(),
        ]
    );
    let squares: String = (0..100).map(|i| format!("{i} {}\n", i * i)).collect();
    assert_eq!(std::fs::read_to_string(&b).unwrap(), squares + "end of 100\n");
    drop(rt);
    let said = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        said.starts_with("[tests/file_io/std_habits.rs:") && said.ends_with("] 6 * 7 = 42\n"),
        "dbg! as std's: {said:?}"
    );
}

/// Ends a table through `io::Write` alone: `write_all`, `write` of what is left, `flush`.
fn end_through_io_write<W: gpuio::device::io::Write>(w: &mut W) -> Result<(), W::Error> {
    w.write_all(b"end of ")?;
    let mut rest: &[u8] = b"100\n";
    while !rest.is_empty() {
        let n = w.write(rest)?;
        rest = &rest[n..];
    }
    w.flush()
}
