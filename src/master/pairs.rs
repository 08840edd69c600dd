//! A worker bound to a CPU (`cpu_affinity`) and the application process it talks
//! to over a unix socket, bound to the same CPU.
//!
//! A worker keeps one connection to php-fpm (or a pre-forking upstream such as
//! gunicorn), and one of the application's processes serves that connection alone:
//! the two take turns, each waiting while the other runs. On the same CPU a turn
//! is a switch between them; on two CPUs each turn wakes the other CPU, which may
//! be running another pair's half, and the pairs settle apart and stay apart
//! (hello.php at 100 kept-alive clients on two cores: p99 13.6-15.0 ms unbound,
//! 9.2-10.2 ms with the workers and their children bound; docs/scaling.md).
//!
//! The worker writes its connection's socket inode and the application's
//! listening pid (`SO_PEERCRED`) in its slot and rings the doorbell; the master,
//! which can read every process's descriptors (root), asks the kernel for the
//! socket's other end (`sys::unix_peer_inode`), finds which of the listening
//! process and its children holds it, and binds that process to the worker's CPU.
//! The CPUs it had are given back when the worker ends or opens another connection
//! (unless another worker's pair has taken the process since).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use nix::sched::CpuSet;

use crate::base::sys;
use crate::config::Affinity;
use crate::scoreboard::Slot;

/// How soon a slot's new connection is looked at after the last: a worker whose
/// application closes its connections opens one a request, and each look is a
/// search through the application's processes.
const AGAIN: Duration = Duration::from_secs(1);

/// One worker's bound application process.
pub(super) struct Pair {
    /// The worker's socket (the slot's `app_socket` when it was looked at).
    inode: u64,
    /// When: a slot is looked at again a second later at the soonest.
    at: Instant,
    /// The application process bound, if one was found.
    bound: Option<Bound>,
}

struct Bound {
    pid: i32,
    cpu: usize,
    /// Its CPUs before.
    before: CpuSet,
}

/// Every slot's pair.
#[derive(Default)]
pub(super) struct Pairs(HashMap<usize, Pair>);

impl Pairs {
    /// Binds the application process at the other end of each bound worker's new
    /// unix-socket connection to the worker's CPU (`workers`: the slot and pid of
    /// each live worker, from the master's own table). Cheap when nothing is new: a
    /// load per worker.
    pub(super) fn look(&mut self, board: &[Slot], workers: impl Iterator<Item = (usize, i32)>, affinity: &Affinity) {
        if matches!(affinity, Affinity::Off | Affinity::Home) {
            return;
        }
        let mut allowed = None;
        for (slot, worker) in workers {
            let s = &board[slot];
            let inode = s.app_socket.load(Relaxed);
            let seen = self.0.get(&slot);
            if inode == 0 || seen.is_some_and(|p| p.inode == inode || p.at.elapsed() < AGAIN) {
                continue;
            }
            let listener = s.app_pid.load(Relaxed);
            self.release(slot);
            let allowed = allowed.get_or_insert_with(sys::allowed_cpus);
            let Some(cpu) = affinity.cpu_for(slot, allowed) else { continue };
            let bound = match serving(worker, inode, listener) {
                Ok(Some(pid)) => self.bind(pid, cpu),
                Ok(None) => None,
                Err(e) => {
                    log::debug!("cannot find the application process of worker slot {slot}'s connection: {e}");
                    None
                }
            };
            self.0.insert(slot, Pair { inode, at: Instant::now(), bound });
        }
    }

    /// Binds `pid` to `cpu`, taking it from another slot's pair that had it (the
    /// process serves a new connection now): the CPUs it had before any pair are
    /// the ones given back.
    fn bind(&mut self, pid: i32, cpu: usize) -> Option<Bound> {
        let earlier = self.0.values_mut().find_map(|p| p.bound.take_if(|b| b.pid == pid));
        match sys::bind_process(pid, cpu) {
            Ok(before) => {
                log::debug!("application process {pid} bound to CPU {cpu}, with the worker it serves");
                Some(Bound { pid, cpu, before: earlier.map_or(before, |e| e.before) })
            }
            Err(e) => {
                log::debug!("cannot bind application process {pid} to CPU {cpu}: {e}");
                if let Some(e) = earlier {
                    let _ = sys::set_cpus_of(pid, &e.before);
                }
                None
            }
        }
    }

    /// The worker of `slot` ended or left its connection: its application process
    /// gets its CPUs back, if no one moved it since.
    pub(super) fn release(&mut self, slot: usize) {
        let Some(Pair { bound: Some(b), .. }) = self.0.remove(&slot) else { return };
        if sys::bound_to(b.pid, b.cpu) {
            let _ = sys::set_cpus_of(b.pid, &b.before);
        }
    }
}

/// Which process holds the other end of socket `inode`, which worker `worker`
/// holds: the application's listening process `listener` or one of its children,
/// never one of root's. `None`: not found (the connection closed meanwhile, the
/// application lives elsewhere, or the slot names what its worker does not hold:
/// the slot is the worker's to write, so nothing in it is taken on trust).
fn serving(worker: i32, inode: u64, listener: i32) -> std::io::Result<Option<i32>> {
    if listener <= 0 || !holds(worker, inode) {
        return Ok(None);
    }
    let peer = sys::unix_peer_inode(inode)?;
    if peer == 0 {
        return Ok(None);
    }
    let serves = |&pid: &i32| holds(pid, peer) && !runs_as_root(pid);
    Ok(std::iter::once(listener).chain(children(listener)).find(serves))
}

/// Whether process `pid` has socket `inode` among its descriptors.
fn holds(pid: i32, inode: u64) -> bool {
    let name = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == name.as_str()))
}

/// Whether process `pid` runs as root (its effective uid), or cannot be read.
fn runs_as_root(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let euid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1));
    euid.is_none_or(|u| u == "0")
}

/// The children of process `pid` (`/proc/PID/task/TID/children`).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
        .collect()
}
