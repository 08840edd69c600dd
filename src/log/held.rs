//! Access-log records held back in a worker (`[[access_log]] buffer`), kept where the
//! master can reach them, so that no record is lost however the worker ends: the
//! master writes what a worker killed by `KILL` (or crashed) held.
//!
//! Every worker slot owns a fixed piece of memory shared with the master (its
//! [`Shelf`], a part of the [`Region`] mapped before the first fork). A worker lays
//! its buffered logs out on it in the config's order ([`layout`]): per log an area of
//! one word, then the records. The word counts the bytes of whole records held: a
//! record is copied in first and counted after, so the word never covers part of
//! one. The worker writes the records out (one `write()`) when the next does not
//! fit, once the oldest is `flush` old, and before it exits, then counts none. The
//! records live only there: no copy, and the buffer costs what a private one did.
//!
//! Three may write an area out, never two at once:
//! - the worker, as above, with its stop alarm held off;
//! - the worker's stop alarm, when a stop signal found the worker busy for a second
//!   (`sys::catch_stop`), before it ends the worker;
//! - the master, once it reaped the worker and before the slot gets another: from
//!   the config the worker was forked with it lays the shelf out again (trusting
//!   nothing the worker wrote but the records and the words, each cut to its area),
//!   writes each area's records to its log's current file and counts none.
//!
//! A worker killed between its `write()` and the word's reset leaves that batch
//! counted, and the master writes it again: a record may then appear twice, never
//! not at all. Records held across a rotation go to the new file, whoever writes
//! them (the old one may be compressed by then).

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Release};

use crate::base::sys::{self, AlarmBlocked, LastWrite, SharedBytes};

/// An area's word: the bytes of whole records it holds.
const WORD: usize = std::mem::size_of::<AtomicUsize>();

/// The least shared memory per slot: room for a reload to add buffered logs beside
/// those at start (three of the default 8 KiB, and most of a fourth). The region is
/// sized at start, as the scoreboard is; a reload that asks for more than its slot's
/// room gets smaller buffers (said in the error log).
pub const MIN_ROOM: usize = 32 * 1024;

/// A log whose buffer finds less room than this (or than its buffer, if smaller)
/// left on the shelf writes each record at once: no record is held where the master
/// cannot reach it. One longest record (`access::MAX_RECORD`).
const MIN_AREA: usize = 4096;

/// Slots' pieces start on their own pages: a worker's writes never share a cache line
/// with its neighbour's.
const PAGE: usize = 4096;

/// Where one log's records go on a shelf: its word at `at`, then up to `cap` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    pub at: usize,
    pub cap: usize,
}

/// The areas of logs with buffers `buffers` (0: not buffered) on a shelf of `room`
/// bytes, in order; `None` for a log written at once (not buffered, or no room left).
/// A log that does not find its whole buffer gets what is left.
pub fn layout(buffers: &[usize], room: usize) -> Vec<Option<Area>> {
    let mut next = 0;
    buffers
        .iter()
        .map(|&want| {
            let cap = want.min(room.saturating_sub(next + WORD));
            if want == 0 || cap < want.min(MIN_AREA) {
                return None;
            }
            let area = Area { at: next, cap };
            next = (next + WORD + cap).next_multiple_of(WORD);
            Some(area)
        })
        .collect()
}

/// The shelf a slot needs for logs with buffers `buffers`, at least [`MIN_ROOM`].
pub fn room_for(buffers: &[usize]) -> usize {
    let needed: usize = buffers.iter().filter(|&&b| b > 0).map(|b| (WORD + b).next_multiple_of(WORD)).sum();
    needed.max(MIN_ROOM).next_multiple_of(PAGE)
}

/// The logs whose buffer a shelf of `room` bytes cuts (index, buffer, what it gets).
pub fn cut(buffers: &[usize], room: usize) -> Vec<(usize, usize, usize)> {
    layout(buffers, room)
        .iter()
        .zip(buffers)
        .enumerate()
        .filter_map(|(i, (area, &want))| {
            let got = area.map_or(0, |a| a.cap);
            (want > 0 && got < want).then_some((i, want, got))
        })
        .collect()
}

/// Every slot's shelf, in one shared mapping made before the first fork.
pub struct Region {
    mem: SharedBytes,
    room: usize,
}

impl Region {
    /// Maps `slots` shelves sized for logs with buffers `buffers`.
    pub fn map(buffers: &[usize], slots: usize) -> std::io::Result<Region> {
        let room = room_for(buffers);
        let mem = sys::map_shared_bytes(
            room.checked_mul(slots.max(1)).ok_or_else(|| std::io::Error::other("too many slots"))?,
        )?;
        Ok(Region { mem, room })
    }

    /// Bytes per shelf.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Slot `slot`'s shelf.
    pub fn shelf(&self, slot: usize) -> Shelf {
        Shelf { mem: self.mem.part(slot * self.room, self.room) }
    }
}

/// One slot's piece of the [`Region`] (or a process's own, in `pika -X`).
#[derive(Clone, Copy)]
pub struct Shelf {
    mem: SharedBytes,
}

impl Shelf {
    /// A shelf of this process's own, for logs with buffers `buffers` (`pika -X`,
    /// tests).
    pub fn private(buffers: &[usize]) -> std::io::Result<Shelf> {
        Ok(Shelf { mem: sys::map_shared_bytes(room_for(buffers))? })
    }

    /// Where the logs with buffers `buffers` go on this shelf ([`layout`]).
    pub fn layout(&self, buffers: &[usize]) -> Vec<Option<Area>> {
        layout(buffers, self.mem.len())
    }

    /// Counts no record in `areas` (the master, before it forks a worker onto the
    /// shelf: until that worker lays it out, the master reads these words).
    pub fn clear(&self, areas: &[Option<Area>]) {
        for a in areas.iter().flatten() {
            if let Some(word) = self.mem.word(a.at) {
                word.store(0, Release);
            }
        }
    }

    /// The bytes of records `area` holds (cut to the area: the worker's word is not
    /// trusted further).
    pub fn leftover(&self, area: Area) -> usize {
        self.mem.word(area.at).map_or(0, |w| w.load(Acquire).min(area.cap))
    }

    /// Writes the records `area` holds to `fd` (one `write()`) and counts none. The
    /// worker that held them is gone.
    pub fn write_leftover(&self, area: Area, fd: i32) -> std::io::Result<usize> {
        let len = self.leftover(area);
        let written = self.mem.write_out(fd, area.at + WORD, len);
        if let Some(word) = self.mem.word(area.at) {
            word.store(0, Release);
        }
        match written {
            Ok(n) if n < len => Err(std::io::Error::other(format!("short write ({n} of {len})"))),
            other => other,
        }
    }
}

/// One buffered log's area, as the worker holding records in it keeps it.
pub struct Held {
    mem: SharedBytes,
    /// Where the records start (after the word).
    records: usize,
    /// The word: bytes of whole records, for whoever writes them if this worker cannot.
    count: &'static AtomicUsize,
    cap: usize,
    len: usize,
    /// When the oldest waiting record came (`scoreboard::now_ms`).
    since_ms: u64,
    last: &'static LastWrite,
}

impl Held {
    /// Free room.
    pub fn room(&self) -> usize {
        self.cap - self.len
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How long ago the oldest waiting record came.
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.since_ms)
    }

    /// Copies one whole record in (the caller made room), then counts it.
    #[inline]
    pub fn push(&mut self, record: &[u8], now_ms: u64) {
        if self.len == 0 {
            self.since_ms = now_ms;
        }
        self.mem.copy_in(self.records + self.len, record);
        self.len += record.len();
        self.count.store(self.len, Release);
    }

    /// Writes the waiting records, if any, to `fd` (one `write()`) and forgets them,
    /// with the stop alarm held off meanwhile. Returns how many bytes were to go
    /// and what `write()` said.
    pub fn drain(&mut self, fd: i32) -> Option<(usize, std::io::Result<usize>)> {
        if self.len == 0 {
            return None;
        }
        let _quiet = AlarmBlocked::hold();
        let written = self.mem.write_out(fd, self.records, self.len);
        let len = std::mem::take(&mut self.len);
        self.count.store(0, Release);
        Some((len, written))
    }

    /// The log's descriptor changed (reopened).
    pub fn set_fd(&self, fd: i32) {
        let _quiet = AlarmBlocked::hold();
        self.last.fd.store(fd, Release);
    }
}

/// What a log needs to hold records on a shelf: its area, the part of it to use,
/// and its descriptor.
pub struct Want {
    pub area: Area,
    pub cap: usize,
    pub fd: i32,
}

/// Lays the logs of `wants` out on `shelf` (counting none yet) and publishes them
/// for the stop alarm. Call once per process, before any record.
pub fn install(shelf: Shelf, wants: &[Want]) -> Vec<Held> {
    let mem = shelf.mem;
    let last: &'static [LastWrite] = Box::leak(
        wants
            .iter()
            .map(|w| LastWrite::new(w.fd, mem, w.area.at, w.cap.min(w.area.cap)))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let held = wants
        .iter()
        .zip(last)
        .filter_map(|(w, last)| {
            let count = mem.word(w.area.at)?;
            count.store(0, Release);
            Some(Held { mem, records: w.area.at + WORD, count, cap: w.cap.min(w.area.cap), len: 0, since_ms: 0, last })
        })
        .collect();
    sys::write_last(last);
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_laid_out_in_order_on_words_and_cut_to_the_room() {
        let a = |at, cap| Some(Area { at, cap });
        assert_eq!(layout(&[8192, 0, 4097], MIN_ROOM), [a(0, 8192), None, a(8200, 4097)]);
        // 4097 ends at 8200 + 8 + 4097 = 12305, the next word at 12312.
        assert_eq!(layout(&[8192, 0, 4097, 100], MIN_ROOM)[3], a(12312, 100));
        // Not whole: what is left, if that is a record's worth; else at once.
        assert_eq!(layout(&[20_000, 20_000], MIN_ROOM), [a(0, 20_000), a(20_008, MIN_ROOM - 20_016)]);
        assert_eq!(layout(&[30_000, 20_000, 512], MIN_ROOM), [a(0, 30_000), None, a(30_008, 512)]);
        assert_eq!(layout(&[30_000, 20_000, 4096], MIN_ROOM), [a(0, 30_000), None, None]);
        assert_eq!(cut(&[30_000, 0, 20_000], MIN_ROOM), [(2, 20_000, 0)]);
        assert_eq!(cut(&[8192; 3], MIN_ROOM), []);
    }

    #[test]
    fn a_shelf_is_sized_for_the_logs_at_start_and_on_pages() {
        assert_eq!(room_for(&[]), MIN_ROOM);
        assert_eq!(room_for(&[8192]), MIN_ROOM);
        assert_eq!(room_for(&[1 << 20, 0, 1 << 20]), (2 << 20) + PAGE);
        let buffers = [1 << 20, 8192];
        assert!(cut(&buffers, room_for(&buffers)).is_empty());
    }

    #[test]
    fn what_a_worker_left_is_written_once_and_cut_to_its_area() {
        let region = Region::map(&[64, 64], 2).unwrap();
        let (one, two) = (region.shelf(0), region.shelf(1));
        let areas = one.layout(&[64, 64]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = std::fs::File::create(&path).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let wants: Vec<Want> = areas.iter().flatten().map(|&area| Want { area, cap: area.cap, fd }).collect();
        let mut held = install(one, &wants);
        // The worker's own write counts nothing left.
        held[0].push(b"a0\n", 0);
        assert_eq!(one.leftover(areas[0].unwrap()), 3);
        assert!(matches!(held[0].drain(fd), Some((3, Ok(3)))));
        assert_eq!(one.leftover(areas[0].unwrap()), 0);
        held[1].push(b"b1\n", 0);
        held[0].push(b"a1\n", 0);
        held[0].push(b"a2\n", 0);
        assert_eq!(two.leftover(areas[0].unwrap()), 0, "another slot's shelf");
        // The worker dies here: the master writes what each area holds, once.
        for area in areas.iter().flatten() {
            one.write_leftover(*area, fd).unwrap();
            assert_eq!(one.leftover(*area), 0);
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a0\na1\na2\nb1\n");
        // A word that says more than its area holds is cut to the area.
        let a = areas[0].unwrap();
        one.mem.word(a.at).unwrap().store(usize::MAX, Release);
        assert_eq!(one.leftover(a), 64);
        one.clear(&areas);
        assert_eq!(one.leftover(a), 0);
    }
}
