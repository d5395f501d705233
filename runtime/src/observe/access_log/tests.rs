//! The access log's buffer, writer and files, against real files (and a
//! small tmpfs, as root, for a disk that fills up).

use super::*;
use crate::observe::log_line::tests::entry;

#[test]
fn past_the_buffer_lines_are_dropped_and_counted_until_the_writer_takes_them() {
    let dropped = Arc::new(Counter::default());
    // Four lines of room: one shard per line at most, one line each.
    let shared = Shared::new(AccessLogFormat::Combined, 4, SHARDS, dropped.clone());
    assert_eq!((shared.shards.len(), shared.per_shard), (4, 1));
    let e = entry();
    assert!(shared.log(&e), "the shard is full: wake the writer");
    assert!(!shared.log(&e));
    assert_eq!(dropped.get(), 1);
    let i = shard_index() % shared.shards.len();
    let mut spare = Lines::default();
    assert!(shared.take(i, &mut spare));
    assert_eq!(spare.text.iter().filter(|b| **b == b'\n').count(), 1);
    assert_eq!(spare.ends, [(0, spare.text.len())]);
    assert!(!shared.take(i, &mut Lines::default()), "nothing left");
    // Room again once the writer took the lines.
    assert!(shared.log(&e));
    assert_eq!(dropped.get(), 1);
    // The default buffer: 16 workers, 16 shards of 1,024 lines; two
    // workers use two shards, of half the buffer each.
    let shared = Shared::new(AccessLogFormat::Json, 16_384, 16, dropped.clone());
    assert_eq!((shared.shards.len(), shared.per_shard), (16, 1024));
    let shared = Shared::new(AccessLogFormat::Json, 16_384, 2, dropped);
    assert_eq!((shared.shards.len(), shared.per_shard), (16, 8192));
}

#[test]
fn long_lines_are_dropped_past_a_kib_a_line_of_buffer() {
    let dropped = Arc::new(Counter::default());
    // 64 lines of room, 64 KiB: a line made long by a 16 KiB user agent
    // of bytes escaped as `\xHH` (64 KiB) fills it.
    let shared = Shared::new(AccessLogFormat::Combined, 64, 1, dropped.clone());
    let mut e = entry();
    e.text = RequestText::new("/", None, Some(&[0xff; 16 << 10]));
    shared.log(&e);
    assert_eq!(dropped.get(), 0);
    for _ in 0..10 {
        shared.log(&e);
    }
    assert_eq!(dropped.get(), 10);
    let i = shard_index() % shared.shards.len();
    let mut spare = Lines::default();
    assert!(shared.take(i, &mut spare));
    assert_eq!(spare.ends.len(), 1);
    // Short lines still fill the line count.
    shared.log(&entry());
    assert_eq!(dropped.get(), 10);
}

/// Lines that cannot be written (here: a full disk) are counted as
/// dropped, and the server goes on.
#[test]
fn lines_that_cannot_be_written_are_counted_as_dropped() {
    let config = LogConfig {
        access: AccessLogTarget::File(PathBuf::from("/dev/full")),
        format: AccessLogFormat::Combined,
        buffer: 1 << 10,
    };
    let dropped = Arc::new(Counter::default());
    let log = AccessLog::start(&config, SHARDS, dropped.clone())
        .expect("opens")
        .expect("on");
    for _ in 0..50 {
        log.log(&entry());
    }
    log.close();
    assert_eq!(dropped.get(), 50);
}

/// A disk that fills up in the middle of a batch (a small tmpfs, as
/// root): the line written in part is cut off the file, only the lines
/// not in the file are counted as dropped, and once there is room again
/// every line in the file is whole.
#[test]
fn a_disk_filling_up_mid_line_leaves_only_whole_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(
        mount(&["-t", "tmpfs", "-o", "size=8k", "tmpfs"]),
        "mounting a tmpfs needs root"
    );
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let path = dir.path().join("access.log");
    let config = LogConfig {
        access: AccessLogTarget::File(path.clone()),
        format: AccessLogFormat::Json,
        buffer: 1 << 10,
    };
    let dropped = Arc::new(Counter::default());
    let log = AccessLog::start(&config, SHARDS, dropped.clone())
        .expect("opens")
        .expect("on");
    // The one line every entry makes.
    let one = Shared::new(AccessLogFormat::Json, 4, 1, Arc::default());
    one.log(&entry());
    let mut expected = Lines::default();
    assert!(one.take(shard_index() % one.shards.len(), &mut expected));
    let expected = expected.text;
    // Far more than 8 KiB of lines, in batches.
    for _ in 0..10 {
        for _ in 0..20 {
            log.log(&entry());
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(mount(&["-o", "remount,size=1m"]), "remount");
    log.log(&entry());
    log.close();
    let text = std::fs::read(&path).expect("read");
    assert!(text.ends_with(b"\n"));
    let lines: Vec<&[u8]> = text.split_inclusive(|&b| b == b'\n').collect();
    // Lines differ only in their request ids, of one length.
    for line in &lines {
        assert_eq!(line.len(), expected.len(), "a line cut short");
        assert!(line.starts_with(b"{\"time\":") && line.ends_with(b"}\n"));
    }
    assert!(lines.len() < 200, "the disk did fill up");
    assert_eq!(lines.len() as u64 + dropped.get(), 201);
}

#[test]
fn close_writes_every_line_from_every_thread_in_each_threads_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("access.log");
    let config = LogConfig {
        access: AccessLogTarget::File(path.clone()),
        format: AccessLogFormat::Combined,
        buffer: 1 << 20,
    };
    let dropped = Arc::new(Counter::default());
    let log = AccessLog::start(&config, SHARDS, dropped.clone())
        .expect("opens")
        .expect("on");
    // Six threads on six shards log one line each, one after the other,
    // in the reverse order of their shards: a writer that wrote the
    // lines shard by shard would reverse them.
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let mut turns = Vec::new();
        for t in 0..6 {
            let (go_tx, go_rx) = std::sync::mpsc::channel::<u64>();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            turns.push((go_tx, done_rx));
            let (ready, log) = (ready_tx.clone(), &log);
            s.spawn(move || {
                let _ = ready.send((shard_index() % log.shared.shards.len(), t));
                if let Ok(n) = go_rx.recv() {
                    log.log(&Entry {
                        bytes: 9_000_000 + n,
                        ..entry()
                    });
                }
                let _ = done_tx.send(());
            });
        }
        let mut order: Vec<(usize, usize)> = ready_rx.iter().take(6).collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        assert!(
            order.windows(2).all(|w| w[0].0 != w[1].0),
            "six shards: {order:?}"
        );
        for (n, &(_, t)) in order.iter().enumerate() {
            turns[t].0.send(n as u64).expect("go");
            turns[t].1.recv().expect("done");
        }
    });
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let log = log.clone();
            s.spawn(move || {
                for n in 0..5_000u64 {
                    log.log(&Entry {
                        bytes: t * 1_000_000 + n,
                        ..entry()
                    });
                }
            });
        }
    });
    log.close();
    assert_eq!(dropped.get(), 0);
    let written = std::fs::read_to_string(&path).expect("log");
    let mut last = [None::<u64>; 10];
    let mut lines = 0;
    for line in written.lines() {
        lines += 1;
        let bytes: u64 = line
            .split(' ')
            .nth(9)
            .and_then(|b| b.parse().ok())
            .expect("a byte count");
        let (t, n) = ((bytes / 1_000_000) as usize, bytes % 1_000_000);
        assert!(
            last[t].is_none_or(|l| l + 1 == n),
            "thread {t}: {n} after {:?}",
            last[t]
        );
        last[t] = Some(n);
    }
    assert_eq!(lines, 20_006);
    // After close nothing more is written; it is counted instead.
    log.log(&entry());
    assert_eq!(dropped.get(), 1);
}
