//! The one place where pika talks to the kernel through `unsafe`.
//!
//! Everything else in the crate is `#![deny(unsafe_code)]`. What lives here is the
//! small set of calls that Rust's std and nix cannot make safely on our behalf:
//! `fork`, `_exit`, the shared scoreboard mapping, resetting signal dispositions in a
//! child, `prctl(PR_SET_PDEATHSIG)` and a couple of socket options that no crate
//! wraps. Each block says why it is sound.
//!
//! It stays one file past 500 lines by design: every `unsafe` call lives here, so a
//! review of soundness reads one module.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{
    AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

/// The outcome of [`fork`], seen from either side.
pub enum Forked {
    Parent(Pid),
    Child,
}

/// `fork(2)`.
///
/// The caller must be single-threaded (the master is: see `.clippy.toml`), and the
/// child must leave through [`exit_now`], never by returning into the parent's code.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the master process never starts a thread, so the child inherits no lock
    // held by another thread; the child only runs the worker loop and ends in `_exit`.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => Ok(Forked::Parent(child)),
        Ok(nix::unistd::ForkResult::Child) => {
            OWN_PID.store(0, Relaxed);
            Ok(Forked::Child)
        }
        Err(e) => Err(io::Error::from(e)),
    }
}

/// This process's id, asked of the kernel once (and again after each [`fork`]):
/// the access log's `%P` wrote it per request, a `getpid` each (glibc keeps no
/// copy).
pub fn own_pid() -> u32 {
    match OWN_PID.load(Relaxed) {
        0 => {
            let pid = std::process::id();
            OWN_PID.store(pid, Relaxed);
            pid
        }
        pid => pid,
    }
}

static OWN_PID: AtomicU32 = AtomicU32::new(0);

/// `_exit(2)`: leave the process now, running no destructor and no atexit handler.
///
/// A forked worker owns copies of the master's guards (pid file, temp dirs in tests);
/// running their destructors would undo the master's work.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

/// Marker for types that may live in memory shared between processes.
///
/// # Safety
/// The type must consist only of atomics (or arrays of them), be `#[repr(C)]`, and be
/// valid when every byte is zero.
pub unsafe trait SharedAtomic: Sync {}

/// Maps `count` zeroed values of `T` in anonymous `MAP_SHARED` memory, which every
/// process forked afterwards sees and writes to. The mapping lives as long as the
/// process (it is never unmapped).
pub fn map_shared<T: SharedAtomic>(count: usize) -> io::Result<&'static [T]> {
    let bytes = std::mem::size_of::<T>()
        .checked_mul(count.max(1))
        .and_then(NonZeroUsize::new)
        .ok_or_else(|| io::Error::other("shared mapping of zero or overflowing size"))?;
    use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous};
    // SAFETY: a fresh anonymous mapping aliases nothing; the kernel zero-fills it.
    let ptr =
        unsafe { mmap_anonymous(None, bytes, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED) }
            .map_err(io::Error::from)?;
    // SAFETY: the mapping is page-aligned (enough for any atomic), `bytes` long, never
    // unmapped, and all-zero bytes are a valid `T` by the `SharedAtomic` contract. Only
    // shared references are handed out, and `T` is made of atomics, so concurrent
    // access from several processes is well-defined.
    Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast::<T>(), count.max(1)) })
}

/// Blocks every signal and returns the previous mask (used around `fork`, so that a
/// signal cannot reach the child before it has reset its handlers).
pub fn block_all_signals() -> SigSet {
    let mut old = SigSet::empty();
    // Cannot fail with valid arguments.
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old));
    old
}

/// Restores a mask saved by [`block_all_signals`].
pub fn restore_signals(old: &SigSet) {
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(old), None);
}

/// Signals a worker ignores: the master's control signals (only the master acts on
/// them) and INT (a Ctrl-C in a terminal reaches the whole foreground group; the
/// master decides what it means, as Apache's children do).
const WORKER_IGNORES: [Signal; 9] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGPIPE,
];

/// Signals a worker gives their default action after the fork (the master handles
/// them; a worker's `SIGTERM` and `SIGALRM` then get the handlers of [`catch_stop`]).
const WORKER_DEFAULTS: [Signal; 3] = [Signal::SIGTERM, Signal::SIGCHLD, Signal::SIGALRM];

/// In a freshly forked child: replace every handler inherited from the master
/// (signal-hook's handlers survive `fork` and would write into the master's
/// self-pipe) and unblock all signals. TERM and CHLD get their default action.
pub fn reset_signals_in_child() {
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for sig in WORKER_IGNORES {
        // SAFETY: installing SIG_IGN runs no code of ours in signal context.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &ignore) };
    }
    for sig in WORKER_DEFAULTS {
        // SAFETY: installing SIG_DFL runs no code of ours in signal context.
        let _ = unsafe { nix::sys::signal::sigaction(sig, &default) };
    }
    restore_signals(&SigSet::empty());
}

/// `CLOCK_MONOTONIC_COARSE` in milliseconds (0 should the kernel refuse it): a read
/// of the vDSO's page, asked several times a request, where nix's wrapper (its
/// `Result`, errno) cost as much again as the read.
pub fn coarse_ms() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec the call writes; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// The CPUs this process may run on (its affinity mask; every CPU of the machine
/// unless a cgroup, `taskset` or `systemd`'s `CPUAffinity=` narrowed it).
pub fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else { return Vec::new() };
    (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect()
}

/// The CPU on which the kernel last took in a packet of socket `fd`
/// (`SO_INCOMING_CPU`): over a network card, the CPU its receive queue interrupts;
/// over loopback, the CPU the client sent from.
pub fn incoming_cpu(fd: BorrowedFd<'_>) -> Option<usize> {
    socket2::SockRef::from(&fd).cpu_affinity().ok()
}

/// Binds this process to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    set_cpus_of(0, &one_cpu(cpu)?)
}

/// Lets this process run on the CPUs `cpus` (its mask back after [`pin_to_cpu`]).
pub fn set_cpus(cpus: &[usize]) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    set_cpus_of(0, &set)
}

/// Binds process `pid` to one CPU; returns the CPUs it could use before, to give
/// them back ([`set_cpus_of`]). The kernel allows it to root (`CAP_SYS_NICE`) and
/// to a process of the same user.
pub fn bind_process(pid: i32, cpu: usize) -> io::Result<nix::sched::CpuSet> {
    let before = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(pid))?;
    set_cpus_of(pid, &one_cpu(cpu)?)?;
    Ok(before)
}

/// The set of CPU `cpu` alone.
fn one_cpu(cpu: usize) -> io::Result<nix::sched::CpuSet> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    Ok(set)
}

/// Gives process `pid` the CPUs `set` (what [`bind_process`] returned).
pub fn set_cpus_of(pid: i32, set: &nix::sched::CpuSet) -> io::Result<()> {
    Ok(nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid), set)?)
}

/// Whether process `pid` may run on exactly one CPU, `cpu`.
pub fn bound_to(pid: i32, cpu: usize) -> bool {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(pid)) else { return false };
    (0..nix::sched::CpuSet::count()).all(|c| set.is_set(c).unwrap_or(false) == (c == cpu))
}

/// The inode of a socket (what `/proc/PID/fd/N` names as `socket:[INODE]`), and the
/// pid of the process that made its peer's listening socket (`SO_PEERCRED`: for a
/// connection to a pre-forking application, its master).
pub fn unix_socket_ids(fd: BorrowedFd<'_>) -> io::Result<(u64, i32)> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let inode = nix::sys::stat::fstat(fd)?.st_ino;
    let pid = getsockopt(&fd, PeerCredentials)?.pid();
    Ok((inode, pid))
}

/// The inode of the other end of the unix socket `inode` (the kernel's socket
/// diagnostics, `NETLINK_SOCK_DIAG`: `ss -x` reads the same); 0 when it has none.
pub fn unix_peer_inode(inode: u64) -> io::Result<u64> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const UDIAG_SHOW_PEER: u32 = 4;
    const UNIX_DIAG_PEER: u16 = 2;
    let inode = u32::try_from(inode).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: socket() takes plain integers; the descriptor is owned right after.
    let raw = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = own_fd(raw);
    // nlmsghdr (16 bytes), then unix_diag_req (24): family, protocol, pad, states,
    // inode, what to show, and the cookie "none" (all ones).
    let mut req = Vec::with_capacity(40);
    req.extend_from_slice(&40u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req.extend_from_slice(&[0; 8]); // sequence, port
    req.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&inode.to_ne_bytes());
    req.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    req.extend_from_slice(&[0xff; 8]);
    // SAFETY: send reads `req.len()` bytes of `req`, a live buffer.
    if unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 512];
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`, a live local.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    peer_of_reply(&buf[..n as usize], UNIX_DIAG_PEER)
}

/// The peer inode in a reply to [`unix_peer_inode`]'s request: an error message
/// (the socket is gone), or the socket's description and its attributes.
fn peer_of_reply(reply: &[u8], peer_attr: u16) -> io::Result<u64> {
    let u16_at = |i: usize| reply.get(i..i + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let u32_at = |i: usize| reply.get(i..i + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a socket diagnostics reply that does not read");
    let len = u32_at(0).ok_or_else(bad)? as usize;
    let kind = u16_at(4).ok_or_else(bad)?;
    if kind == libc::NLMSG_ERROR as u16 {
        let code = u32_at(16).ok_or_else(bad)? as i32;
        return Err(io::Error::from_raw_os_error(-code));
    }
    // Attributes after the 16-byte header and the 16-byte description.
    let mut at = 32;
    while at + 4 <= len.min(reply.len()) {
        let (alen, atype) = (u16_at(at).ok_or_else(bad)? as usize, u16_at(at + 2).ok_or_else(bad)?);
        if alen < 4 {
            return Err(bad());
        }
        if atype == peer_attr {
            return Ok(u64::from(u32_at(at + 4).ok_or_else(bad)?));
        }
        at += (alen + 3) & !3;
    }
    Ok(0)
}

/// Asks the kernel to send `sig` to this process when its parent dies.
pub fn die_with_parent(sig: Signal) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a plain integer and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Moves this process to `SCHED_BATCH`: same fair share as `SCHED_OTHER`, but a
/// wake-up does not preempt the task running on the CPU.
pub fn sched_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param`, a valid local, and nothing else.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Lets the other tasks waiting for this CPU run first (`sched_yield`); returns at
/// once when none waits. It cannot fail on Linux.
pub fn yield_cpu() {
    let _ = nix::sched::sched_yield();
}

/// Moves this process back to `SCHED_OTHER`, the normal policy (a wake-up may
/// preempt the running task). A process needs no privilege for it.
pub fn sched_normal() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param`, a valid local, and nothing else.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The data segments a TCP socket has sent (`tcpi_data_segs_out`): how many writes
/// left as separate segments, for tests of what goes out together.
#[cfg(test)]
pub fn tcp_data_segments_out(s: &impl AsRawFd) -> io::Result<u32> {
    // SAFETY: tcp_info is plain integers, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, a valid local of
    // that size, and the new length into `len`.
    let rc =
        unsafe { libc::getsockopt(s.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&raw mut info).cast(), &mut len) };
    if rc == 0 { Ok(info.tcpi_data_segs_out) } else { Err(io::Error::last_os_error()) }
}

/// Sets whether this process may dump core and be attached to (`ptrace`,
/// `pidfd_getfd`) by processes of its own user. Linux resets the flag on `setuid`
/// (to `fs.suid_dumpable`), so call it after the uid change.
pub fn set_dumpable(dumpable: bool) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes a plain integer and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(dumpable), 0, 0, 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// In a freshly forked worker: closes every descriptor from 3 up but those in `keep`
/// (the master's pid file, its signal pipe, the daemon's ready pipe and whatever else
/// the master held). The closed descriptors belong to objects of the master that the
/// child never drops: it leaves through [`exit_now`]. Also used by the new master of
/// an upgrade before it opens anything, on descriptors no object owns.
pub fn close_descriptors_except(keep: &[i32]) -> io::Result<()> {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&fd| u32::try_from(fd).ok()).filter(|&fd| fd >= 3).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut first = 3u32;
    let mut gaps = Vec::with_capacity(keep.len() + 1);
    for &fd in &keep {
        if fd > first {
            gaps.push((first, fd - 1));
        }
        first = fd + 1;
    }
    gaps.push((first, u32::MAX));
    for (lo, hi) in gaps {
        // SAFETY: close_range(2) takes plain integers; see above for why nothing
        // still in use owns the descriptors it closes.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ENOSYS) {
                return Err(err);
            }
            // Before Linux 5.9: the descriptors /proc lists.
            return close_listed_except(&keep);
        }
    }
    Ok(())
}

/// [`close_descriptors_except`] without `close_range(2)`.
fn close_listed_except(keep: &[u32]) -> io::Result<()> {
    let open: Vec<u32> =
        std::fs::read_dir("/proc/self/fd")?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    // The directory's own descriptor is in the list, closed again by now: EBADF.
    for fd in open.into_iter().filter(|fd| *fd >= 3 && keep.binary_search(fd).is_err()) {
        // SAFETY: as in close_descriptors_except.
        unsafe { libc::close(fd as i32) };
    }
    Ok(())
}

/// Sets an integer socket option that neither nix nor socket2 wraps
/// (`TCP_DEFER_ACCEPT`, `TCP_CORK`).
pub fn set_int_sockopt(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` outlives the call and its size is passed along with it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Connections waiting in a listening TCP socket's accept queue (`tcpi_unacked` of
/// `TCP_INFO`, which Linux fills with the accept backlog for a listener).
pub fn accept_queue_len(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: all-zero is a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` outlive the call; `len` is the buffer's size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc == 0 { Ok(info.tcpi_unacked) } else { Err(io::Error::last_os_error()) }
}

/// How [`open_beneath`] treats symbolic links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinks {
    /// Follow links whose target stays inside the root (`RESOLVE_BENEATH`).
    Inside,
    /// Refuse every link (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`).
    Never,
    /// Follow any link, even out of the root (the path itself is still confined).
    Follow,
}

/// Opens `path` (relative) under the directory `dir` for reading, with `openat2(2)`, so
/// that the kernel itself refuses any resolution that leaves `dir`: `..`, absolute
/// links, links pointing out. This is the containment check with no race between
/// checking and opening. `O_NONBLOCK` keeps a FIFO in the docroot from hanging a worker.
///
/// Where the kernel has no `openat2` (before Linux 5.6, or under valgrind), the file is
/// opened with `openat` and its real path (`/proc/self/fd`) checked against `dir_path`,
/// the root's canonical path: the same policy, with a check after the open.
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    dir_path: &std::path::Path,
    path: &std::path::Path,
    links: Symlinks,
) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
    static CHECKED_ENV: std::sync::Once = std::sync::Once::new();
    // PIKA_NO_OPENAT2=1 takes the fallback path on purpose (its tests use it).
    CHECKED_ENV.call_once(|| NO_OPENAT2.store(std::env::var_os("PIKA_NO_OPENAT2").is_some(), Relaxed));

    let mut bytes = path.as_os_str().as_bytes().to_vec();
    if bytes.is_empty() {
        bytes.push(b'.');
    }
    let c = std::ffi::CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    if !NO_OPENAT2.load(Relaxed) {
        let resolve = match links {
            Symlinks::Inside => libc::RESOLVE_BENEATH,
            Symlinks::Never => libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
            Symlinks::Follow => 0,
        };
        // SAFETY: `open_how` is a plain C struct for which all-zero is valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        how.resolve = resolve;
        // SAFETY: the path is a valid C string and `how` a valid open_how of the size we
        // pass; both outlive the call. The returned fd, if any, is ours alone.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
            return Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOSYS) {
            return Err(err);
        }
        NO_OPENAT2.store(true, Relaxed);
    }
    // SAFETY: the path is a valid C string that outlives the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let real = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
    let allowed = match links {
        Symlinks::Follow => true,
        Symlinks::Inside => real.starts_with(dir_path),
        // No link anywhere: the real path is the lexical one.
        Symlinks::Never => real == dir_path.join(path),
    };
    if allowed { Ok(file) } else { Err(io::Error::from_raw_os_error(libc::EXDEV)) }
}

/// Maps the first `len` bytes of a file (its size, from the caller's `fstat`) read-only.
///
/// pika never reads these bytes itself: it only hands them to the kernel in
/// `writev`. If the file is truncated while mapped, the kernel's copy then fails with
/// `EFAULT` and the connection is closed, instead of the `SIGBUS` a read by our own
/// code would raise.
pub fn map_file(file: &std::fs::File, len: u64) -> io::Result<memmap2::Mmap> {
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the mapping is read-only and only ever passed to the kernel (see above),
    // so a concurrent change to the file cannot cause undefined behaviour in our code.
    // The length comes from our own fstat, which spares memmap2 another one.
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }
}

/// Bytes in anonymous `MAP_SHARED` memory, mapped before a fork so that the parent
/// and every child reach the same bytes (a worker's held access-log records, which the
/// master writes out if the worker dies: see `log/held.rs`). The mapping is never
/// unmapped, so a copy of this handle stays valid for the life of the process.
///
/// Its bytes are never lent out as Rust references: they are copied in, handed to
/// the kernel by `write(2)`, or read as the atomic words [`SharedBytes::word`] gives.
/// Each part has one writer at a time (the worker whose slot it is; the master only
/// once that worker is reaped).
#[derive(Clone, Copy)]
pub struct SharedBytes {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping lives as long as the process and is reached only through the
// methods below (copies, `write(2)`, atomics), so a handle may move between threads.
unsafe impl Send for SharedBytes {}
// SAFETY: as above; no method lends out a plain reference to the bytes.
unsafe impl Sync for SharedBytes {}

/// Maps `len` zeroed bytes shared with every process forked afterwards (page-aligned).
pub fn map_shared_bytes(len: usize) -> io::Result<SharedBytes> {
    let size = NonZeroUsize::new(len).ok_or_else(|| io::Error::other("shared mapping of zero size"))?;
    use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous};
    // SAFETY: a fresh anonymous mapping aliases nothing; the kernel zero-fills it.
    let ptr = unsafe { mmap_anonymous(None, size, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED) }
        .map_err(io::Error::from)?;
    Ok(SharedBytes { ptr: ptr.cast(), len })
}

impl SharedBytes {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `len` bytes from `at` (panics past the end).
    pub fn part(&self, at: usize, len: usize) -> SharedBytes {
        assert!(at <= self.len && len <= self.len - at, "a part past the end of a shared mapping");
        // SAFETY: `at` is within the mapping (checked above).
        SharedBytes { ptr: unsafe { self.ptr.add(at) }, len }
    }

    /// The word at `at` as an atomic both sides load and store; `None` unless `at`
    /// is a multiple of 8 with a whole word there.
    pub fn word(&self, at: usize) -> Option<&'static AtomicUsize> {
        let align = std::mem::align_of::<AtomicUsize>();
        let fits = at % align == 0
            && self.ptr.as_ptr().addr() % align == 0
            && at.checked_add(std::mem::size_of::<AtomicUsize>()).is_some_and(|end| end <= self.len);
        // SAFETY: aligned and within the mapping (checked), which is never unmapped;
        // all-zero is a valid AtomicUsize, and any bits are; the word is only ever
        // reached as an atomic (the layout keeps records off it).
        fits.then(|| unsafe { &*self.ptr.as_ptr().add(at).cast::<AtomicUsize>() })
    }

    /// Copies `bytes` in at `at` (panics past the end).
    #[inline]
    pub fn copy_in(&self, at: usize, bytes: &[u8]) {
        assert!(at <= self.len && bytes.len() <= self.len - at, "a copy past the end of a shared mapping");
        // SAFETY: the destination is within the mapping (checked) and cannot overlap
        // `bytes`, a Rust slice of this process's own memory; this part has no other
        // writer meanwhile (see the type).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len()) }
    }

    /// One `write(2)` of the `len` bytes from `at` to `fd` (cut at the end of the
    /// mapping; async-signal-safe).
    pub fn write_out(&self, fd: i32, at: usize, len: usize) -> io::Result<usize> {
        let at = at.min(self.len);
        let len = len.min(self.len - at);
        // SAFETY: the range is within the mapping (clamped above); the kernel only
        // reads it.
        let n = unsafe { libc::write(fd, self.ptr.as_ptr().add(at).cast(), len) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }
}

/// One log's held records as a stopping worker's alarm writes them if its loop
/// could not (see `log/held.rs`): the log's descriptor, and the area in shared
/// memory: a word counting the bytes of whole records, then the records.
pub struct LastWrite {
    pub fd: AtomicI32,
    mem: SharedBytes,
    /// Where the area's word is; the records follow it.
    at: usize,
    cap: usize,
}

impl LastWrite {
    pub fn new(fd: i32, mem: SharedBytes, at: usize, cap: usize) -> LastWrite {
        LastWrite { fd: AtomicI32::new(fd), mem, at, cap }
    }

    /// Writes the records the word counts, then counts none (async-signal-safe: a
    /// load, `write(2)`, a store).
    fn write_now(&self) {
        let Some(word) = self.mem.word(self.at) else { return };
        let len = word.load(Acquire).min(self.cap);
        if len > 0 {
            let _ = self.mem.write_out(self.fd.load(Acquire), self.at + std::mem::size_of::<AtomicUsize>(), len);
            word.store(0, Release);
        }
    }
}

/// The entries of this process, published once, read by the alarm's handler.
static LAST_WRITES: AtomicPtr<LastWrite> = AtomicPtr::new(std::ptr::null_mut());
static LAST_WRITES_LEN: AtomicUsize = AtomicUsize::new(0);

/// Publishes the held records' areas for [`catch_stop`]'s alarm. Each entry's area
/// must stay laid out as it says for the life of the process.
pub fn write_last(entries: &'static [LastWrite]) {
    LAST_WRITES.store(std::ptr::null_mut(), Release);
    LAST_WRITES_LEN.store(entries.len(), Release);
    LAST_WRITES.store(entries.as_ptr().cast_mut(), Release);
}

/// The signal that asked this process to stop at once (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The eventfd the stop handler rings, so that a loop asleep in `epoll_wait` wakes.
static STOP_BELL: AtomicI32 = AtomicI32::new(-1);

/// How long a worker asked to stop has to log what it was writing and write its
/// held records from its loop, before its alarm writes the held records itself and
/// ends it: a loop turn takes microseconds, unless a script holds the worker, and a
/// fast stop must stay fast (the master's own `KILL` comes later, after
/// `STOP_GRACE`).
pub const STOP_ALARM_SECS: u32 = 1;

/// Catches `TERM` (and `INT`, unless ignored, as in a worker; `pika -X` gets it from
/// a terminal) for a loop that stops in its own time: the handler only notes the
/// signal ([`stop_asked`]), rings the returned descriptor (an eventfd: add it to the
/// loop's `epoll` set) and sets an alarm of [`STOP_ALARM_SECS`]; the alarm writes
/// the areas of [`write_last`] and ends the process as the stop signal would have.
/// Call once per process; the process must be single-threaded.
pub fn catch_stop() -> io::Result<BorrowedFd<'static>> {
    // SAFETY: eventfd(2) takes plain integers; the descriptor it returns is new.
    let bell = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if bell < 0 {
        return Err(io::Error::last_os_error());
    }
    // Never closed: the handler may write to it until the process ends.
    STOP_BELL.store(bell, Release);
    let stop = SigAction::new(SigHandler::Handler(on_stop), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only uses atomics, write(2) and alarm(2), all
        // async-signal-safe. An ignored INT (a worker) stays ignored.
        unsafe {
            if let Ok(prev) = nix::sys::signal::sigaction(sig, &stop)
                && matches!(prev.handler(), SigHandler::SigIgn)
            {
                let _ = nix::sys::signal::sigaction(sig, &prev);
            }
        }
    }
    let alarm = SigAction::new(SigHandler::Handler(on_alarm), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only loads atomics and calls write(2), signal(2),
    // sigprocmask(2), raise(3) and _exit(2), all async-signal-safe.
    unsafe { nix::sys::signal::sigaction(Signal::SIGALRM, &alarm) }.map_err(io::Error::from)?;
    // SAFETY: `bell` is open and ours (above), and stays open.
    Ok(unsafe { BorrowedFd::borrow_raw(bell) })
}

/// The signal that asked this process to stop, once one did.
#[inline]
pub fn stop_asked() -> Option<i32> {
    match STOP_SIGNAL.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

extern "C" fn on_stop(sig: libc::c_int) {
    if STOP_SIGNAL.compare_exchange(0, sig, Release, std::sync::atomic::Ordering::Relaxed).is_err() {
        return;
    }
    let one: u64 = 1;
    // SAFETY: write(2) and alarm(2) are async-signal-safe; `one` outlives the call.
    unsafe {
        libc::write(STOP_BELL.load(Acquire), (&one as *const u64).cast(), 8);
        libc::alarm(STOP_ALARM_SECS);
    }
}

extern "C" fn on_alarm(_: libc::c_int) {
    let table = LAST_WRITES.load(Acquire);
    if !table.is_null() {
        // SAFETY: LAST_WRITES points at LAST_WRITES_LEN entries that live as long as
        // the process (leaked), published before the pointer.
        let entries = unsafe { std::slice::from_raw_parts(table, LAST_WRITES_LEN.load(Acquire)) };
        for e in entries {
            e.write_now();
        }
    }
    let sig = match STOP_SIGNAL.load(Acquire) {
        0 => libc::SIGALRM,
        sig => sig,
    };
    die_by(sig)
}

/// Ends the process the way `sig` would have (its default action), so the parent
/// sees the same status; async-signal-safe.
pub fn die_by(sig: i32) -> ! {
    // SAFETY: signal(2), sigprocmask(2), raise(3) and _exit(2) are async-signal-safe
    // and take plain values; `set` is a local that outlives the calls.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
        libc::_exit(128 + sig)
    }
}

/// Holds the stop alarm off while alive (held records being written, or their
/// descriptor changed), so that its handler and the worker never both write them.
pub struct AlarmBlocked(SigSet);

impl AlarmBlocked {
    pub fn hold() -> AlarmBlocked {
        let mut set = SigSet::empty();
        set.add(Signal::SIGALRM);
        let mut old = SigSet::empty();
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old));
        AlarmBlocked(old)
    }
}

impl Drop for AlarmBlocked {
    fn drop(&mut self) {
        let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}

/// Takes ownership of a descriptor the kernel just installed in this process (one
/// received with `SCM_RIGHTS`, a fresh `dup`).
pub fn own_fd(raw: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `raw` was installed by recvmsg (or fcntl) for this call alone: nothing
    // else in the process knows the number, so the OwnedFd is its only owner.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) }
}

/// Takes a variable out of the environment (a socket number another process passed,
/// which no child must see again).
///
/// Called once, at the start of `main`, before anything could start a thread.
pub fn take_env(name: &str) -> Option<String> {
    let value = std::env::var(name).ok();
    if value.is_some() {
        // SAFETY: the process is single-threaded (the master never starts a thread,
        // and this runs at the start of main), so nothing reads the environment
        // while it changes.
        unsafe { std::env::remove_var(name) };
    }
    value
}

/// Takes ownership of descriptor `raw`, which the process that started this one
/// left open for it (a listening socket, a pipe): checked to be open and not one of
/// stdin, stdout or stderr, then made close-on-exec.
pub fn adopt_inherited_fd(raw: std::os::fd::RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if raw < 3 {
        return Err(io::Error::other(format!("descriptor {raw} is stdin, stdout or stderr")));
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; on a number that is not open
    // it fails with EBADF and touches nothing.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return Err(io::Error::other(format!("descriptor {raw}: {}", io::Error::last_os_error())));
    }
    // SAFETY: the descriptor is open, and the environment that named it is how the
    // parent hands it to this process alone: it is read once, at start, and removed
    // (`take_env`), so no other owner of the number exists in this process.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    set_cloexec(std::os::fd::AsFd::as_fd(&fd), true)?;
    Ok(fd)
}

/// Sets or clears `FD_CLOEXEC` (cleared: an `exec`'d program inherits it).
pub fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    let flags = if on { FdFlag::FD_CLOEXEC } else { FdFlag::empty() };
    fcntl(fd, FcntlArg::F_SETFD(flags))?;
    Ok(())
}

/// Limits a script's process gets (`gateway::child`); 0 leaves one unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptLimits {
    /// `RLIMIT_CPU`, seconds.
    pub cpu_secs: u64,
    /// `RLIMIT_AS`, bytes.
    pub memory: u64,
}

/// What a script's process starts with ([`spawn_script`]): the C strings are the
/// caller's, built before the spawn (nothing is allocated between the clone and the
/// `exec`).
pub struct ScriptExec<'a> {
    /// An absolute path: no `PATH` search.
    pub program: &'a CStr,
    /// `argv`, ending with a null pointer.
    pub argv: &'a [*const libc::c_char],
    /// `NAME=value` strings, ending with a null pointer.
    pub envp: &'a [*const libc::c_char],
    pub cwd: &'a CStr,
    /// What becomes its stdin, stdout and stderr.
    pub stdio: [BorrowedFd<'a>; 3],
    pub limits: ScriptLimits,
}

/// Bytes of stack for the child between its clone and its `exec` (a dozen system
/// calls; glibc's `posix_spawn` gives its child 32 KiB).
const SPAWN_STACK: usize = 64 * 1024;

/// What the child reads, and where it says why it could not `exec`.
#[repr(C)]
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [libc::c_int; 3],
    cpu_secs: u64,
    memory: u64,
    /// The `errno` of the step that failed; 0 if the `exec` happened.
    error: AtomicI32,
}

/// Starts a CGI script's process as `posix_spawn` does, sharing the worker's memory
/// until its `exec` (`clone(CLONE_VM | CLONE_VFORK)`): no copy of the worker's page
/// tables for a process that replaces them at once, and no copy-on-write faults in
/// the worker afterwards (a C program with a worker's 6 MiB measured 980 µs per
/// fork + exec + wait of a tiny script against 570-700 µs so). Between the clone
/// and the `exec` the child, on a stack of its own, makes only system calls: it
/// moves `stdio` to 0-2, leads a process group of its own, enters `cwd`, sets
/// every signal the worker ignores or handles to its default, asks to die with the
/// worker (`SIGKILL`), takes the limits and no core file, marks every descriptor
/// from 3 up close-on-exec (none of the worker's listeners, client sockets or logs
/// reaches the script, whatever flag they were opened with), unblocks all signals
/// and runs `program`. What it could not do comes back as the error. The worker
/// is single-threaded and blocks every signal meanwhile, so nothing of ours runs in
/// the child.
pub fn spawn_script(x: &ScriptExec<'_>) -> io::Result<Pid> {
    use std::sync::atomic::Ordering::Relaxed;
    if x.argv.last() != Some(&std::ptr::null()) || x.envp.last() != Some(&std::ptr::null()) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "argv and envp must end with a null pointer"));
    }
    // Descriptors below 3 would be overwritten by the moves to 0-2: copies above.
    let mut above = Vec::new();
    let mut stdio = [0; 3];
    for (to, fd) in stdio.iter_mut().zip(x.stdio) {
        let raw = fd.as_raw_fd();
        *to = if raw < 3 {
            let copy = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
            above.push(own_fd(copy));
            copy
        } else {
            raw
        };
    }
    let args = ChildArgs {
        program: x.program.as_ptr(),
        argv: x.argv.as_ptr(),
        envp: x.envp.as_ptr(),
        cwd: x.cwd.as_ptr(),
        stdio,
        cpu_secs: x.limits.cpu_secs,
        memory: x.limits.memory,
        error: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; SPAWN_STACK];
    // The stack grows down from its end, 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + SPAWN_STACK) & !15;
    let old = block_all_signals();
    // SAFETY: the child runs `script_child` on `stack`, which outlives it (the
    // caller is suspended until the child's exec or exit: CLONE_VFORK), reads only
    // `args` and writes only `args.error`; every signal is blocked, so no handler of
    // the worker runs in the child.
    let pid = unsafe {
        libc::clone(
            script_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(&args).cast_mut().cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    restore_signals(&old);
    drop((above, stack));
    if pid < 0 {
        return Err(clone_error);
    }
    let pid = Pid::from_raw(pid);
    match args.error.load(Relaxed) {
        0 => Ok(pid),
        errno => {
            // It exited (127) without its exec: reaped here.
            let _ = reap(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Waits for our child `pid` to end.
pub fn reap(pid: Pid) -> nix::Result<nix::sys::wait::WaitStatus> {
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(nix::errno::Errno::EINTR) => {}
            done => return done,
        }
    }
}

/// The child of [`spawn_script`], from its clone to its `exec`: system calls only.
extern "C" fn script_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent keeps alive, and it is suspended
    // until this process execs or exits.
    let a = unsafe { &*arg.cast::<ChildArgs>() };
    let fail = || -> libc::c_int {
        // SAFETY: errno is this thread's (the parent's, suspended); _exit never returns.
        unsafe {
            a.error.store((*libc::__errno_location()).max(1), std::sync::atomic::Ordering::Relaxed);
            libc::_exit(127)
        }
    };
    // SAFETY: raw system calls on plain values and the caller's C strings, all
    // async-signal-safe; nothing is allocated and nothing of the worker's is written.
    unsafe {
        for (target, &fd) in a.stdio.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                return fail();
            }
        }
        if libc::setpgid(0, 0) != 0 || libc::chdir(a.cwd) != 0 {
            return fail();
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        // Those the worker ignores or handles (its TERM and its stop alarm): 12
        // calls, not 31.
        for &sig in WORKER_IGNORES.iter().chain(&WORKER_DEFAULTS) {
            libc::sigaction(sig as libc::c_int, &action, std::ptr::null_mut());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        for (res, value) in [(libc::RLIMIT_CPU, a.cpu_secs), (libc::RLIMIT_AS, a.memory)] {
            if value > 0 {
                libc::setrlimit(res, &libc::rlimit { rlim_cur: value, rlim_max: value });
            }
        }
        libc::setrlimit(libc::RLIMIT_CORE, &libc::rlimit { rlim_cur: 0, rlim_max: 0 });
        const CLOSE_RANGE_CLOEXEC: u32 = 4;
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
            // Before Linux 5.11: one flag at a time, over the whole table.
            let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(256, 65536) as i32;
            for fd in 3..max {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(a.program, a.argv, a.envp);
    }
    fail()
}

/// A descriptor that reads ready when process `pid` (our child) exits.
pub fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) takes plain integers; the descriptor it returns is new
    // and ours alone.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_socket_diagnostics_name_a_unix_sockets_peer() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (ia, _) = unix_socket_ids(a.as_fd()).unwrap();
        let (ib, pid) = unix_socket_ids(b.as_fd()).unwrap();
        assert_eq!(pid, std::process::id() as i32, "a pair's peer is this process");
        assert_eq!(unix_peer_inode(ia).unwrap(), ib);
        assert_eq!(unix_peer_inode(ib).unwrap(), ia);
        drop(b);
        // Closed: the kernel forgets it, or no longer names a peer.
        assert!(unix_peer_inode(ib).is_err() || unix_peer_inode(ib).unwrap() == 0);
    }

    #[test]
    fn a_diagnostics_error_reads_as_its_errno() {
        let mut reply = vec![0u8; 36];
        reply[..4].copy_from_slice(&36u32.to_ne_bytes());
        reply[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        reply[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(peer_of_reply(&reply, 2).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(peer_of_reply(&reply[..3], 2).is_err());
    }
}
