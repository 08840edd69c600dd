//! A worker process: after the fork, set itself up (signals, privileges), then serve
//! from its event loop (`events`): new connections, and requests on the kept-alive
//! connections it holds (`parked`), one request at a time, until it must retire.
//! A kept-alive connection goes, after its first answer, to the event loop of the
//! CPU its packets come in on (`home`), so a client thread's connections share
//! one loop; under `cpu_affinity = "home"` (the default) the loop runs on that CPU
//! while it holds such a connection (`events::Loop::keep_place`).
//!
//! A worker leaves only through [`ChildExit`] codes and `_exit`: the master reads the
//! code to tell a normal retirement from a worker that could not even start (which
//! stops the server instead of forking again and again, as Apache's
//! `APEXIT_CHILDFATAL` does).

mod ctx;
mod events;
mod home;
mod parked;

use ctx::SlotObserver;
pub use ctx::{ChildExit, WorkerCtx};

use std::sync::atomic::Ordering::Relaxed;

use nix::sys::signal::Signal;

use crate::base::sys;
use crate::config::RunAs;
use crate::fork::handover::Handover;
use crate::gateway::spool::Disk;
use crate::kinds::status::page::{StatusPage, View};
use crate::log::access::AccessLogs;
use crate::log::held::Shelf;
use crate::serve::connection::Server;
use crate::site::Site;

/// The worker's life after `fork()`. Never returns.
pub fn child_main(ctx: WorkerCtx<'_>) -> ! {
    let code = run(ctx);
    sys::exit_now(code as i32)
}

/// Serves in this process until something fatal happens (`pika -X`).
pub fn run(mut ctx: WorkerCtx<'_>) -> ChildExit {
    crate::log::set_slot(ctx.slot);
    if let Some(pod) = ctx.pod.as_deref_mut() {
        pod.close_write();
    }
    if ctx.master.is_some() {
        sys::reset_signals_in_child();
        // Of the master's descriptors a worker keeps only what it uses: a worker (or
        // whoever can attach to it) must not reach the pid file, which root's
        // `pika -k` trusts, nor the master's pipes.
        if let Err(e) = sys::close_descriptors_except(&kept_descriptors(&ctx)) {
            log::error!("cannot close the master's descriptors: {e}");
            return ChildExit::Fatal;
        }
    }
    // Counted before `set_limits` binds the worker to one CPU.
    let allowed = sys::allowed_cpus();
    let loops = ctx.config.workers.cpu_affinity.loops(&allowed);
    if let Err(code) = set_limits(&ctx) {
        return code;
    }
    if let Err(code) = confine(&mut ctx) {
        return code;
    }
    if let Some(master) = ctx.master {
        // Die with the master. Only now: the kernel clears the parent-death signal
        // when a process changes its uid or gid, so set before the drop it would be
        // gone. If the master died before this call, no signal will come: look.
        let _ = sys::die_with_parent(Signal::SIGTERM);
        if nix::unistd::getppid() != master {
            return ChildExit::Retired;
        }
    }
    let slot = &ctx.scoreboard.slots[ctx.slot];
    slot.pid.store(std::process::id() as i32, Relaxed);
    crate::rules::apply::share_failures(ctx.scoreboard.failures);
    crate::scoreboard::upstreams::serve_in_slot(ctx.slot);
    let mut logs = std::mem::replace(&mut ctx.logs, AccessLogs::none());
    logs.watch_epoch(&ctx.scoreboard.header.log_epoch, ctx.log_epoch);
    logs.count_errors(&slot.traffic.log_write_errors);
    let shelf = match ctx.held {
        Some(shelf) => Ok(shelf),
        None => Shelf::private(&AccessLogs::buffers(&ctx.config.access_logs)),
    };
    match shelf {
        Ok(shelf) => logs.hold_back(shelf),
        Err(e) => {
            log::error!("cannot map memory for held access-log records: {e}");
            return ChildExit::Fatal;
        }
    }
    // Each worker builds its own rustls setup from the certificates the master loaded
    // and the ticket keys it made, so a session resumes on any worker.
    let tls = match &ctx.config.tls {
        Some(certs) if ctx.listeners.list.iter().any(|l| l.tls) => {
            match crate::tls::server_config(certs.clone(), ctx.tickets.clone(), crate::acme::alpn::certificate) {
                Ok(c) => Some(c),
                Err(e) => {
                    log::error!("worker cannot set up TLS: {e}");
                    return ChildExit::Fatal;
                }
            }
        }
        _ => None,
    };
    let master_pid = ctx.master.map_or(std::process::id() as i32, |p| p.as_raw());
    let certificates = |now| ctx.config.certificate_expiries(now);
    let upstreams = ctx.config.upstreams();
    let server = View {
        scoreboard: ctx.scoreboard,
        master_pid,
        workers_max: ctx.config.workers.max,
        max_connections: ctx.config.workers.max_connections,
        certificates: &certificates,
        upstreams: &upstreams,
    };
    let status = StatusPage { server };
    let sites = match Site::open_all(ctx.config, status) {
        Ok(s) => s,
        Err(e) => {
            log::error!("worker cannot start: {e}");
            return ChildExit::Fatal;
        }
    };
    let https_port = ctx.listeners.list.iter().find(|l| l.tls).map(|l| l.bound.port());
    let disks = (Disk::bodies(slot, ctx.scoreboard.slots), Disk::answers(slot, ctx.scoreboard.slots));
    let mut server = Server::new(ctx.config, sites, logs, ctx.token.to_string(), https_port, disks);
    let mut obs = SlotObserver {
        slot,
        ctx: &ctx,
        loops,
        allowed,
        client: None,
        scratch: Vec::with_capacity(64),
        retiring: false,
    };
    match events::Loop::new(&ctx, tls, &mut server, &mut obs) {
        Ok(l) => l.run(),
        Err(e) => {
            log::error!("worker cannot wait for connections: {e}");
            ChildExit::Fatal
        }
    }
}

/// The worker's process limits: `max_memory` (RLIMIT_AS), `sched_batch` and
/// `cpu_affinity`.
fn set_limits(ctx: &WorkerCtx<'_>) -> Result<(), ChildExit> {
    if let Some(limit) = ctx.config.workers.max_memory {
        // A worker that leaks or is fed something huge fails its allocation (and is
        // replaced) instead of taking the machine down.
        use nix::sys::resource::{Resource, setrlimit};
        if let Err(e) = setrlimit(Resource::RLIMIT_AS, limit, limit) {
            log::error!("cannot set workers.max_memory: {e}");
            return Err(ChildExit::Fatal);
        }
    }
    if ctx.config.workers.sched_batch {
        // A worker woken by a new connection or request waits for the running task's
        // slice (or an idle CPU) instead of preempting it: fewer switches when the
        // CPUs are saturated. The master keeps the normal policy, and so does a
        // worker while TLS handshakes come (`handshake_policy`).
        match sys::sched_batch() {
            Ok(()) => crate::serve::handshakes::on_handshakes_coming(handshake_policy),
            Err(e) => log::warn!("cannot switch the worker to SCHED_BATCH: {e}"),
        }
    }
    // Bound by its slot, so a replacement takes the CPU of the worker it replaces.
    if let Some(cpu) = ctx.config.workers.cpu_affinity.cpu_for(ctx.slot, &sys::allowed_cpus()) {
        match sys::pin_to_cpu(cpu) {
            // The application process at the other end of a unix socket it keeps
            // is bound to this CPU too (`master::pairs`).
            Ok(()) => {
                ctx.scoreboard.slots[ctx.slot].set_cpu(Some(cpu));
                crate::gateway::backend::note_local_apps();
            }
            Err(e) => log::warn!("cannot bind the worker to CPU {cpu}: {e}"),
        }
    }
    Ok(())
}

/// A worker under `SCHED_BATCH` takes the normal policy when a TLS handshake begins,
/// and `SCHED_BATCH` again once none has come for a second: a handshake's turns must
/// not each wait for a slice (`crate::serve::handshakes`). Both moves are a
/// process's own right; one that failed leaves the policy as it was, which serves.
fn handshake_policy(coming: bool) {
    let _ = if coming { sys::sched_normal() } else { sys::sched_batch() };
}

/// Confines the worker before it serves: chroot, the uid change, and whether (and
/// where) it may dump core.
fn confine(ctx: &mut WorkerCtx<'_>) -> Result<(), ChildExit> {
    // chroot needs root, so it comes before the uid change (Apache's order).
    if let Some(jail) = &ctx.config.chroot {
        if let Err(e) = nix::unistd::chroot(jail.as_path()).and_then(|()| nix::unistd::chdir("/")) {
            log::error!("cannot chroot to {}: {e}", jail.display());
            return Err(ChildExit::Fatal);
        }
        crate::log::enter_jail(jail);
        ctx.logs.enter_jail(jail);
        // Lives as long as this process (which ends in _exit).
        ctx.config = Box::leak(Box::new(ctx.config.jailed(jail)));
    }
    if let Some(run_as) = &ctx.config.run_as {
        if let Err(e) = drop_privileges(run_as) {
            log::error!("cannot switch to user {}: {e}", run_as.user);
            return Err(ChildExit::Fatal);
        }
    }
    // A worker may dump core (and be attached to by its own user) only where the
    // operator named a folder for the cores, as Apache's CoreDumpDirectory.
    let dumps = ctx.config.coredump_dir.as_deref();
    if let Some(dir) = dumps {
        if let Err(e) = nix::unistd::chdir(dir) {
            log::error!("cannot enter coredump_dir {}: {e}", dir.display());
            return Err(ChildExit::Fatal);
        }
    }
    if let Err(e) = sys::set_dumpable(dumps.is_some()) {
        log::error!("cannot set whether workers may dump core: {e}");
        return Err(ChildExit::Fatal);
    }
    Ok(())
}

/// What a worker keeps of the master's descriptors: the listeners, its access logs,
/// the error log, the pipe of death and the doorbell (and stdin, stdout, stderr).
fn kept_descriptors(ctx: &WorkerCtx<'_>) -> Vec<i32> {
    use std::os::fd::AsRawFd;
    let mut keep: Vec<i32> = ctx.listeners.list.iter().map(|l| l.socket.as_raw_fd()).collect();
    keep.extend(ctx.logs.fds());
    keep.extend(crate::log::error_log_fd());
    keep.extend(ctx.pod.as_deref().map(|p| p.read_fd().as_raw_fd()));
    keep.extend(ctx.doorbell.map(|d| d.fd().as_raw_fd()));
    keep.extend(ctx.handover.map(|h| h.fds()).into_iter().flatten());
    keep.extend(ctx.homes.iter().flat_map(Handover::fds));
    keep
}

/// Switches to the configured user for good: groups, then gid, then uid (Apache's
/// order: `setgid` before `initgroups`), then checks root cannot be regained.
pub(crate) fn drop_privileges(run_as: &RunAs) -> std::io::Result<()> {
    use nix::unistd::{Uid, setgid, setgroups, setuid};
    setgid(run_as.gid)?;
    setgroups(&run_as.groups)?;
    setuid(run_as.uid)?;
    if !run_as.uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
        return Err(std::io::Error::other("could regain root after setuid"));
    }
    Ok(())
}
