//! The process model on the real binary: the pool, spare-worker maintenance, the pipe
//! of death, crashes, recycling, reloads, stops and the master's death.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;

const SIGKILL: i32 = 9;
const SIGHUP: i32 = 1;
const SIGQUIT: i32 = 3;

fn status(site: &Site) -> String {
    site.status()
}

fn workers(p: &Pika) -> Vec<i32> {
    children_of(p.pid)
}

/// Waits until the status file says `key` satisfies `ok`.
fn wait_status(site: &Site, what: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
    wait_until(limit, what, || {
        let s = status(site);
        ok(&s).then_some(s)
    })
}

fn n(s: &str, key: &str) -> u64 {
    field(s, key).unwrap_or(u64::MAX)
}

/// How many workers the status file's `states:` line has in `state` (0 if none).
fn in_state(s: &str, state: &str) -> u64 {
    let line = s.lines().find_map(|l| l.strip_prefix("states: ")).unwrap_or("");
    line.split(", ").find_map(|part| part.strip_prefix(state)?.trim().parse().ok()).unwrap_or(0)
}

/// What holds a worker: a request to a script that sleeps (a client that stops
/// reading holds none: its answer waits in the worker's set). The site needs
/// [`hold_script`], its config [`HOLD`].
fn slow_client(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(HOLD_GET).unwrap();
    s
}

const HOLD_GET: &[u8] = b"GET /hold/sleep.sh HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// The vhost, with a CGI location for [`hold_script`]: after the config's own
/// tables.
const HOLD: &str = "\n[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
                    [[vhost.location]]\nprefix = \"/hold/\"\ncgi = true\nscript_timeout = \"300s\"\n";

/// A CGI script that sleeps for five minutes: its worker waits on it.
fn hold_script(site: &Site) {
    cgi_script(site, "htdocs/hold/sleep.sh", "#!/bin/sh\nexec sleep 300\n");
}

/// Writes `text` to `path` in the site, executable.
fn cgi_script(site: &Site, path: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    site.write(path, text);
    std::fs::set_permissions(site.path(path), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A pool of `start` workers and at most `max_spare` idle ones (and the
/// `[workers]` keys in `workers`), with the status page (and `extra` after it),
/// every worker ready.
fn pool_with_status(site: &Site, start: usize, max_spare: usize, workers: &str, extra: &str) -> Pika {
    site.config(
        "",
        &format!(
            "[workers]\nstart = {start}\nmin_spare = 1\nmax_spare = {max_spare}\n{workers}[status]\nenabled = true\n{extra}"
        ),
    );
    let p = Pika::start(site, "-F");
    wait_status(site, "every worker ready", DEADLINE, |s| in_state(s, "ready ") as usize == start);
    p
}

/// The worker waiting on a script (in `poll`).
fn held_worker(p: &Pika) -> i32 {
    wait_until(DEADLINE, "a worker waiting on its script", || {
        workers(p).into_iter().find(|&w| blocked_in(w, libc::SYS_poll) && has_child(w))
    })
}

/// Whether `pid` has a child process (its script).
fn has_child(pid: i32) -> bool {
    !children_of(pid).is_empty()
}

#[test]
fn starts_exactly_start_workers_ready() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 3\nmin_spare = 1\nmax_spare = 5\n");
    let p = Pika::start(&site, "-F");
    let s = wait_status(&site, "3 ready workers", DEADLINE, |s| n(s, "workers") == 3);
    assert!(s.contains("states: ready 3"), "{s}");
    assert_eq!(workers(&p).len(), 3);
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_burst_grows_the_pool_then_it_shrinks_back() {
    let site = Site::new();
    hold_script(&site);
    site.config(
        "",
        &format!(
            "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 12\n[http]\nheader_timeout = \"60s\"\n{HOLD}"
        ),
    );
    let p = Pika::start(&site, "-F");
    let clients: Vec<TcpStream> = (0..20).map(|_| slow_client(p.addr)).collect();
    // The pool grows to max and no further.
    let mut peak = 0;
    wait_until(Duration::from_secs(30), "the pool to reach workers.max", || {
        let count = workers(&p).len();
        peak = peak.max(count);
        (count == 12).then_some(())
    });
    for _ in 0..20 {
        peak = peak.max(workers(&p).len());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(peak, 12, "never above workers.max");
    let log = site.error_log();
    let spawns: Vec<u32> =
        log.lines().filter_map(|l| l.split("maintenance: spawning ").nth(1)?.split(' ').next()?.parse().ok()).collect();
    // The slow clients wait in the listen queue, so the master forks one worker per
    // waiting connection at once (a tick may fall while they are still connecting);
    // the doubling ramp alone would take four ticks: 1, 2, 4, 4.
    assert_eq!(spawns.iter().sum::<u32>(), 11, "{spawns:?}");
    assert!(spawns.len() <= 3, "the pool grew by the queue, not by the ramp: {spawns:?}");
    wait_until(DEADLINE, "the pool-full message", || site.error_log().contains("reached workers.max").then_some(()));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(site.error_log().matches("reached workers.max").count(), 1, "said once");

    // The burst ends: idle workers are retired one per tick until the band holds.
    drop(clients);
    let s = wait_status(&site, "idle back inside [min_spare, max_spare]", Duration::from_secs(40), |s| {
        let w = n(s, "workers");
        (1..=2).contains(&w) && s.contains(&format!("states: ready {w}"))
    });
    let log = site.error_log();
    assert!(log.matches("maintenance: retiring one idle worker").count() >= 10, "{s}\n{log}");
    // Retirements went through dummy connections, which the access log leaves out.
    assert!(site.access_lines().iter().all(|l| !l.contains("OPTIONS *")), "internal requests were logged");
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_burst_between_ticks_gets_its_workers_before_the_next_tick() {
    let site = Site::new();
    hold_script(&site);
    site.config(
        "",
        &format!(
            "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 6\n[http]\nheader_timeout = \"60s\"\n{HOLD}"
        ),
    );
    let p = Pika::start(&site, "-F");
    wait_status(&site, "one ready worker", DEADLINE, |s| s.contains("states: ready 1"));
    // The status file is rewritten on every tick: once it changes, the next tick is
    // a second away, and the pool is inside its band (nothing to look at till then).
    let written = || std::fs::metadata(site.status_file()).and_then(|m| m.modified()).ok();
    let before = written();
    wait_until(DEADLINE, "a tick", || (written() != before).then_some(()));
    let clients: Vec<TcpStream> = (0..4).map(|_| slow_client(p.addr)).collect();
    wait_until(DEADLINE, "a worker per slow client and a spare", || (workers(&p).len() == 5).then_some(()));
    // The worker that took the first client rang the master, which forked for the
    // waiting ones at once, not at its next tick.
    let log = site.error_log();
    let first = log.lines().find(|l| l.contains("maintenance: spawning")).unwrap_or_default();
    assert!(first.contains("workers now ("), "the first spawn came from a tick:\n{log}");
    drop(clients);
}

/// CPU time (user + system, in clock ticks: proc(5) fields 14 and 15) used so far.
fn cpu_ticks(pid: i32) -> u64 {
    let f = stat_fields(pid).unwrap();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn the_master_sleeps_while_workers_ring_and_it_cannot_fork() {
    let site = Site::new();
    hold_script(&site);
    site.config(
        "",
        &format!(
            "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n[http]\nheader_timeout = \"60s\"\n{HOLD}"
        ),
    );
    let p = Pika::start(&site, "-F");
    wait_status(&site, "two ready workers", DEADLINE, |s| s.contains("states: ready 2"));
    // Both workers held, a third client queued: every accept found no other worker
    // idle and rang, and the pool is at max. Then WINCH: workers retired, none forked.
    let clients: Vec<TcpStream> = (0..3).map(|_| slow_client(p.addr)).collect();
    wait_until(DEADLINE, "the pool-full message", || site.error_log().contains("reached workers.max").then_some(()));
    for phase in ["full", "paused"] {
        let before = cpu_ticks(p.pid);
        std::thread::sleep(Duration::from_secs(2));
        let used = cpu_ticks(p.pid) - before;
        // A master spinning on its doorbell would use about 200 ticks (100 Hz) here.
        assert!(used < 40, "{phase}: the master used {used} ticks of CPU in 2 s");
        if phase == "full" {
            p.signal(28); // SIGWINCH
        }
    }
    drop(clients);
}

/// A pika of two ready workers with these `[workers]` lines, that has answered.
fn two_workers_answering(extra: &str) -> (Site, Pika) {
    let site = Site::new();
    site.config("", &format!("[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n{extra}"));
    let p = Pika::start(&site, "-F");
    wait_status(&site, "two ready workers", DEADLINE, |s| s.contains("states: ready 2"));
    assert_eq!(get(p.addr, "/").status, 200);
    (site, p)
}

#[test]
fn workers_run_under_sched_batch_unless_turned_off() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    for (extra, want) in [("", SCHED_BATCH), ("sched_batch = false\n", SCHED_OTHER)] {
        let (_site, p) = two_workers_answering(extra);
        assert_eq!(sched_policy(p.pid), SCHED_OTHER, "the master keeps the normal policy");
        for w in n_children(p.pid, 2) {
            assert_eq!(sched_policy(w), want, "worker {w} with [workers] {extra:?}");
        }
    }
}

/// The CPUs a process may run on, as `/proc/PID/status` lists them ("0-1", "1").
fn cpus_allowed(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
}

/// `cpu_affinity = "auto"` binds each worker to one of the CPUs the master may use,
/// by its slot in turn; a list binds them to those; the master stays unbound. By
/// default ("home") and with "off", a worker holding no client is unbound.
#[test]
fn workers_are_bound_to_cpus_when_asked() {
    let master_cpus = cpus_allowed(std::process::id() as i32);
    let allowed = allowed_cpus();
    let last = *allowed.last().unwrap();
    for (extra, want) in [
        ("cpu_affinity = \"auto\"\n", allowed.iter().take(2).map(|c| c.to_string()).collect::<Vec<_>>()),
        (&format!("cpu_affinity = [{last}]\n")[..], vec![last.to_string()]),
        ("", vec![master_cpus.clone()]),
        ("cpu_affinity = \"off\"\n", vec![master_cpus.clone()]),
    ] {
        let (_site, p) = two_workers_answering(extra);
        assert_eq!(cpus_allowed(p.pid), master_cpus, "the master is not bound");
        let mut got: Vec<String> = n_children(p.pid, 2).into_iter().map(cpus_allowed).collect();
        got.sort();
        got.dedup();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "the workers' CPUs with [workers] {extra:?}");
    }
}

/// The CPUs this test may run on, if more than one (one CPU: one event loop, and
/// the tests of where clients go say so and pass).
fn several_cpus() -> Option<Vec<usize>> {
    let allowed = allowed_cpus();
    if allowed.len() < 2 {
        eprintln!("one CPU: one event loop");
        return None;
    }
    Some(allowed)
}

/// The worker that answered the last request from client port `port`, in an access
/// log written with `format = "%P %{remote}p"`.
fn last_served_by(log: &str, port: &str) -> Option<i32> {
    log.lines().rev().find_map(|l| {
        let (pid, p) = l.split_once(' ')?;
        (p == port).then(|| pid.parse::<i32>().unwrap())
    })
}

/// The CPUs this test (and the pika it starts) may run on.
fn allowed_cpus() -> Vec<usize> {
    let ours = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    (0..nix::sched::CpuSet::count()).filter(|&c| ours.is_set(c).unwrap()).collect()
}

/// Kept-alive connections held by each scoreboard slot, from the status page.
fn held_by_slot(addr: SocketAddr) -> std::collections::BTreeMap<u64, u64> {
    by_slot(addr, "conns_keepalive")
}

/// A number of each worker's row of the status page (`pid`, `conns_keepalive`, ...)
/// by its scoreboard slot.
fn by_slot(addr: SocketAddr, key: &str) -> std::collections::BTreeMap<u64, u64> {
    let json: serde_json::Value = serde_json::from_str(&get(addr, "/server-status?json").text()).unwrap();
    let rows = json["workers"].as_array().unwrap().iter();
    rows.map(|w| (w["slot"].as_u64().unwrap(), w[key].as_u64().unwrap())).collect()
}

/// With an event loop per CPU free, a spare stands by: kept-alive clients all go
/// to the loops (the lowest slots, each taking some), none to the spare; once the
/// loops are held by programs, the spare takes new connections again. The same
/// with the workers bound to CPUs (before, a worker counted the loops after it
/// was bound to its one CPU, and one loop took every client).
#[test]
fn kept_alive_clients_stay_on_one_event_loop_per_cpu() {
    for keys in ["", "cpu_affinity = \"auto\"\n"] {
        clients_on_the_loops(keys);
    }
}

/// `n` kept-alive connections to `addr`, each answered once (a GET of `/`).
fn kept_clients(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = connect(addr);
            c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
            assert_eq!(read_response(&mut c, false).unwrap().status, 200);
            c
        })
        .collect()
}

/// [`kept_alive_clients_stay_on_one_event_loop_per_cpu`] with these `[workers]` keys.
fn clients_on_the_loops(keys: &str) {
    let cpus = allowed_cpus().len();
    let site = Site::new();
    hold_script(&site);
    let p = pool_with_status(&site, cpus + 1, cpus + 3, keys, HOLD);
    // A worker decides whether it stands by as it wakes: a spare that saw its
    // loops start a moment late may hold a connection or two of a first try. They
    // go with it, and the next try finds each worker where its count of the loops
    // puts it, so no try before the second counts.
    let clients = 8 * cpus;
    let mut tries = 0;
    let (kept, by_slot) = wait_until(DEADLINE, "the kept-alive clients on the loops alone", || {
        tries += 1;
        let kept = kept_clients(p.addr, clients);
        let by_slot = held_by_slot(p.addr);
        let on_loops: u64 = by_slot.iter().filter(|&(&slot, _)| (slot as usize) < cpus).map(|(_, &n)| n).sum();
        // Each loop holds some, level within one: none is off the listeners for
        // being ahead of the others (`the_event_loops_keep_their_connections_level`)
        // when the scripts below come.
        let each: Vec<u64> = (0..cpus as u64).map(|slot| by_slot.get(&slot).copied().unwrap_or(0)).collect();
        let level = each.iter().all(|&n| n > 0) && each.iter().max().unwrap() - each.iter().min().unwrap() <= 1;
        if tries >= 2
            && on_loops == clients as u64
            && level
            && by_slot.iter().all(|(&slot, &n)| (slot as usize) < cpus || n == 0)
        {
            Some((kept, by_slot))
        } else {
            drop(kept);
            None
        }
    });
    assert_eq!(by_slot.len(), cpus + 1, "{by_slot:?}");
    // Every loop held by a script: the spare listens again, and a new client is
    // answered while they wait.
    let held: Vec<TcpStream> = (0..cpus).map(|_| slow_client(p.addr)).collect();
    wait_until(DEADLINE, "every loop waiting on its script", || {
        let waiting = workers(&p).into_iter().filter(|&w| has_child(w)).count();
        (waiting == cpus).then_some(())
    });
    let t = Instant::now();
    let ask = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut newcomer = connect(p.addr);
    newcomer.write_all(ask).unwrap();
    let first = read_response(&mut newcomer, false).expect("an answer");
    assert_eq!(first.status, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "a new client waited {:?} with the loops held", t.elapsed());
    assert_eq!(first.header("connection"), None, "kept alive while the loops are held");
    // The loops free again (their clients gone, the scripts are cut): the spare's
    // next answer to that client closes its connection, which comes back through
    // the listeners to a loop.
    drop(held);
    wait_until(DEADLINE, "the spare handing its client back", || {
        newcomer.write_all(ask).unwrap();
        let next = read_response(&mut newcomer, false).expect("an answer");
        assert_eq!(next.status, 200);
        (next.header("connection").as_deref() == Some("close")).then_some(())
    });
    drop(kept);
}

/// A kept-alive client whose request comes while its event loop waits on a script
/// is handed to a spare, lent: the spare answers it at once and keeps it while the
/// loop is held, and once the loop is free its next answer closes the connection,
/// so the client comes back through the listeners to the loop. (The flag travels
/// with the connection through the handover socket: a spare that dropped it kept
/// the client for good, one more busy worker on the cores.)
#[test]
fn a_client_lent_to_a_spare_while_its_loop_waits_goes_back_once_the_loop_is_free() {
    let site = Site::new();
    hold_script(&site);
    // One event loop (the list names one CPU) and one spare.
    let p = pool_with_status(&site, 2, 3, "cpu_affinity = [0]\n", HOLD);
    let ask = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let answer = |c: &mut TcpStream| {
        c.write_all(ask).unwrap();
        let r = read_response(c, false).expect("an answer");
        assert_eq!(r.status, 200);
        r
    };
    // A spare that had not yet stood by may take a first client: tried afresh until
    // the loop holds it.
    let mut client = wait_until(DEADLINE, "a client on the event loop", || {
        let mut c = connect(p.addr);
        answer(&mut c);
        let by_slot = held_by_slot(p.addr);
        (by_slot.get(&0) == Some(&1) && by_slot.values().sum::<u64>() == 1).then_some(c)
    });
    let loop_pid = by_slot(p.addr, "pid")[&0] as i32;
    let held = slow_client(p.addr);
    wait_until(DEADLINE, "the event loop waiting on its script", || has_child(loop_pid).then_some(()));
    // Its request comes while the loop waits: a glance later it is the spare's.
    let t = Instant::now();
    let first = answer(&mut client);
    assert!(t.elapsed() < Duration::from_secs(5), "the client waited {:?} for the held loop", t.elapsed());
    assert!(has_child(loop_pid), "answered while the loop still waits");
    assert_eq!(first.header("connection"), None, "kept alive while the loop is held");
    drop(held);
    wait_until(DEADLINE, "the spare handing its lent client back", || {
        (answer(&mut client).header("connection").as_deref() == Some("close")).then_some(())
    });
}

/// The event loops keep their connections level: one that holds more than its
/// siblings (here those taken while a sibling waited on a script) leaves new
/// connections to them until they have caught up. A loop serves its kept-alive
/// clients a round at a time, so its clients wait about as long as it holds
/// connections; new ones taken by whichever loop woke first left 60 / 40 splits
/// of 100 clients, and the heavier loop's tail was the server's.
#[test]
fn the_event_loops_keep_their_connections_level() {
    let cpus = allowed_cpus().len();
    if cpus < 2 {
        eprintln!("one CPU: one event loop, nothing to level");
        return;
    }
    let site = Site::new();
    hold_script(&site);
    // The loops alone: no spare to take what comes while one waits.
    let p = pool_with_status(&site, cpus, cpus, &format!("max = {cpus}\n"), HOLD);
    // While one loop waits on its script, the others take six clients each.
    let script = slow_client(p.addr);
    let waiting = held_worker(&p);
    let before = kept_clients(p.addr, 6 * (cpus - 1));
    drop(script);
    wait_until(DEADLINE, "the loop free of its script and waiting for work", || {
        let sleeping = blocked_in(waiting, libc::SYS_epoll_wait) || blocked_in(waiting, libc::SYS_epoll_pwait);
        (!has_child(waiting) && sleeping).then_some(())
    });
    // The next six go to the loop that holds none, but for one each other loop may
    // take as it wakes, before it sees itself ahead.
    let after = kept_clients(p.addr, 6);
    let slot = by_slot(p.addr, "pid").into_iter().find(|&(_, pid)| pid as i32 == waiting).expect("its slot").0;
    let held = held_by_slot(p.addr);
    assert!(
        held[&slot] as usize >= 6 - (cpus - 1),
        "the loop that waited holds {} of the last six: {held:?}",
        held[&slot]
    );
    drop((before, after));
}

/// A client thread's kept-alive connections end on one event loop, the one of the
/// CPU they come in on (`worker::home`): two client threads, each bound to a CPU,
/// each with four connections that whichever loop woke took, and after a few
/// answers every request of a thread is served by the loop bound to its CPU. Each
/// loop answered both threads before, and every answer woke a task on the other
/// CPU (`docs/scaling.md`, "A client's connections on one loop").
#[test]
fn a_client_threads_connections_go_to_the_loop_of_its_cpu() {
    let Some(allowed) = several_cpus() else { return };
    let (a, b) = (allowed[0], allowed[1]);
    let site = Site::new();
    let log = "[[access_log]]\npath = \"logs/access.log\"\nformat = \"%P %{remote}p\"\nbuffer = 0\n";
    let p = pool_with_status(&site, 2, 2, &format!("max = 2\ncpu_affinity = [{a}, {b}]\n"), log);
    let loop_on = |cpu: usize| {
        let pids = workers(&p).into_iter().filter(|&w| cpus_allowed(w) == cpu.to_string()).collect::<Vec<_>>();
        assert_eq!(pids.len(), 1, "one worker bound to CPU {cpu}");
        pids[0]
    };
    let log_path = site.path("logs/access.log");
    let addr = p.addr;
    let both = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = [(a, loop_on(a)), (b, loop_on(b))]
        .into_iter()
        .map(|(cpu, home)| {
            let (log_path, both) = (log_path.clone(), Arc::clone(&both));
            std::thread::spawn(move || {
                let mut set = nix::sched::CpuSet::new();
                set.set(cpu).unwrap();
                nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
                let mut clients = kept_clients(addr, 4);
                let ports: Vec<String> = clients.iter().map(|c| c.local_addr().unwrap().port().to_string()).collect();
                // Each thread keeps its clients until both are home: a loop that
                // holds fewer than the other keeps what is not its own (level), so a
                // thread that closed its clients early would leave the other's last
                // one where it is.
                let mut home_here = false;
                let what = format!("the connections of the client on CPU {cpu} served by the loop bound to it");
                wait_until(DEADLINE, &what, || {
                    for c in &mut clients {
                        c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
                        assert_eq!(read_response(c, false).unwrap().status, 200);
                    }
                    let text = std::fs::read_to_string(&log_path).unwrap();
                    let last = |port: &String| last_served_by(&text, port);
                    if !home_here && ports.iter().all(|port| last(port) == Some(home)) {
                        home_here = true;
                        both.fetch_add(1, Ordering::SeqCst);
                    }
                    (both.load(Ordering::SeqCst) == 2).then_some(())
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Under the default `cpu_affinity = "home"` an event loop runs on the CPU its
/// clients' packets come in on while it holds them, and anywhere again once they
/// are gone: two client threads bound to two CPUs, each thread's connections on
/// one loop, leave that loop bound to the thread's CPU, and their closing gives the
/// loops back every CPU. With "off" the loops serving the same clients stay unbound.
#[test]
fn an_event_loop_runs_on_its_clients_cpu_while_it_holds_them() {
    let Some(allowed) = several_cpus() else { return };
    let everywhere = cpus_allowed(std::process::id() as i32);
    let log = "[[access_log]]\npath = \"logs/access.log\"\nformat = \"%P %{remote}p\"\nbuffer = 0\n";
    for keys in ["", "cpu_affinity = \"off\"\n"] {
        let site = Site::new();
        let p = pool_with_status(&site, allowed.len(), 1, keys, log);
        let stop = Arc::new(AtomicBool::new(false));
        let ports = Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads: Vec<_> = allowed[..2]
            .iter()
            .map(|&cpu| {
                let (addr, stop, ports) = (p.addr, Arc::clone(&stop), Arc::clone(&ports));
                std::thread::spawn(move || {
                    let mut set = nix::sched::CpuSet::new();
                    set.set(cpu).unwrap();
                    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
                    let mut clients = kept_clients(addr, 4);
                    let mine: Vec<String> =
                        clients.iter().map(|c| c.local_addr().unwrap().port().to_string()).collect();
                    ports.lock().unwrap().push((cpu, mine));
                    while !stop.load(Ordering::SeqCst) {
                        for c in &mut clients {
                            c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
                            assert_eq!(read_response(c, false).unwrap().status, 200);
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })
            })
            .collect();
        // The worker serving each thread's connections, once one serves them all
        // (and, under "home", once it is bound to that thread's CPU: before a swap
        // two loops may each hold the other's client).
        let log_path = site.path("logs/access.log");
        let home = keys.is_empty();
        let loops = wait_until(DEADLINE, "each client thread's connections on one loop, bound under home", || {
            let text = std::fs::read_to_string(&log_path).unwrap();
            let last = |port: &String| last_served_by(&text, port);
            let ports = ports.lock().unwrap();
            let mut loops = Vec::new();
            for (cpu, mine) in ports.iter() {
                let pids: Vec<Option<i32>> = mine.iter().map(last).collect();
                let one = pids[0]?;
                if pids.iter().any(|&p| p != Some(one)) || home && cpus_allowed(one) != cpu.to_string() {
                    return None;
                }
                loops.push((*cpu, one));
            }
            (loops.len() == 2).then_some(loops)
        });
        let shown = |pid: i32| {
            let json: serde_json::Value = serde_json::from_str(&get(p.addr, "/server-status?json").text()).unwrap();
            let row = json["workers"].as_array().unwrap().iter().find(|w| w["pid"] == pid).cloned();
            row.expect("a row for the worker")["cpu"].as_u64()
        };
        for &(cpu, pid) in &loops {
            if home {
                assert_eq!(shown(pid), Some(cpu as u64), "the status page shows the loop's CPU");
            } else {
                assert_eq!(cpus_allowed(pid), everywhere, "a loop serving a client thread under \"off\"");
                assert_eq!(shown(pid), None);
            }
        }
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        wait_until(DEADLINE, "every worker on every CPU once the clients are gone", || {
            workers(&p).into_iter().all(|w| cpus_allowed(w) == everywhere).then_some(())
        });
        for (_, pid) in loops {
            assert_eq!(shown(pid), None, "the status page shows no CPU for an unbound loop");
        }
    }
}

/// A pool shrinking back retires the spares above the event loops, not the loops:
/// the master's dummy connection wakes a loop (the spares standing by are off the
/// listeners), and the loop leaves the pipe of death to a spare holding nothing.
/// Without that, a loop left, its clients went to a spare that then listened, and
/// more workers than CPUs took turns on the cores.
#[test]
fn a_shrinking_pool_retires_spares_not_its_event_loops() {
    let cpus = allowed_cpus().len();
    let site = Site::new();
    let p = pool_with_status(&site, cpus + 3, cpus + 1, "", "");
    let pids = |addr| by_slot(addr, "pid");
    let loops: Vec<(u64, u64)> = pids(p.addr).into_iter().filter(|&(slot, _)| (slot as usize) < cpus).collect();
    assert_eq!(loops.len(), cpus, "{loops:?}");
    // Idle, the loops count as spares too: the master retires two workers.
    wait_until(DEADLINE, "the pool down by two", || (workers(&p).len() == cpus + 1).then_some(()));
    let now = pids(p.addr);
    for (slot, pid) in &loops {
        assert_eq!(now.get(slot), Some(pid), "the event loop in slot {slot} stays: {now:?}");
    }
}

/// A round of the event loop that answered several clients ends with `sched_yield`
/// (they run before the worker's next round); a round of one does not. Seen with
/// strace on the one worker: two kept-alive clients answered one by one, then both
/// at once (their requests came while a script held the worker).
#[test]
fn a_round_of_several_answers_yields_the_cpu() {
    let Some(strace) = need_tool("strace") else { return };
    let site = Site::new();
    let gate = site.path("gate");
    cgi_script(
        &site,
        "htdocs/hold/gate.sh",
        &format!(
            "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.02; done\nprintf 'Content-Type: text/plain\\r\\n\\r\\nopen\\n'\n",
            gate.display()
        ),
    );
    site.config("", &format!("[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 1\nmax = 1\n{HOLD}"));
    let p = Pika::start(&site, "-F");
    let worker = n_children(p.pid, 1)[0];
    let trace = site.path("yields.strace");
    let mut tracer = std::process::Command::new(strace)
        .args(["-qq", "-e", "trace=sched_yield", "-e", "signal=none", "-o"])
        .arg(&trace)
        .args(["-p", &worker.to_string()])
        .spawn()
        .unwrap();
    wait_until(DEADLINE, "strace attached", || {
        let status = std::fs::read_to_string(format!("/proc/{worker}/status")).ok()?;
        status.lines().any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0")).then_some(())
    });
    let ask = |c: &mut TcpStream| c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let answered = |c: &mut TcpStream| assert_eq!(read_response(c, false).expect("a response").status, 200);
    // One by one: rounds of one event each.
    let (mut a, mut b) = (connect(p.addr), connect(p.addr));
    for _ in 0..2 {
        for c in [&mut a, &mut b] {
            ask(c);
            answered(c);
        }
    }
    // Both at once: they ask while the worker waits on the script, so its next wait
    // finds the two ready together.
    let mut held = connect(p.addr);
    held.write_all(b"GET /hold/gate.sh HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    wait_until(DEADLINE, "the worker waiting on its script", || has_child(worker).then_some(()));
    ask(&mut a);
    ask(&mut b);
    std::fs::write(&gate, "").unwrap();
    answered(&mut held);
    answered(&mut a);
    answered(&mut b);
    // One more alone: answered once the worker is past that round, yield and all.
    ask(&mut a);
    answered(&mut a);
    // strace writes what it saw as it detaches.
    send_signal(tracer.id() as i32, nix::sys::signal::Signal::SIGTERM);
    tracer.wait().unwrap();
    let seen = std::fs::read_to_string(&trace).unwrap();
    let yields = seen.lines().filter(|l| l.starts_with("sched_yield")).count();
    assert_eq!(yields, 1, "one round of two answers, one yield:\n{seen}");
}

/// One worker (no spare) with a CGI script at `/hold/gate.sh?NAME` that answers
/// `NAME` once the site has a file `gate-NAME`; the pool and its worker's pid.
fn one_worker_behind_gates(site: &Site) -> (Pika, i32) {
    cgi_script(
        site,
        "htdocs/hold/gate.sh",
        &format!(
            "#!/bin/sh\nwhile [ ! -e {}-$QUERY_STRING ]; do sleep 0.02; done\nprintf 'Content-Type: text/plain\\r\\n\\r\\n%s\\n' \"$QUERY_STRING\"\n",
            site.path("gate").display()
        ),
    );
    site.config("", &format!("[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 1\nmax = 1\n{HOLD}"));
    let p = Pika::start(site, "-F");
    let worker = n_children(p.pid, 1)[0];
    (p, worker)
}

/// Sends a GET of `path` on a kept-alive connection.
fn ask(c: &mut TcpStream, path: &str) {
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap()
}

/// Reads an answer on `c`: a 200 whose body is `body`.
fn answered(c: &mut TcpStream, body: &str) {
    let r = read_response(c, false).expect("a response");
    assert_eq!((r.status, r.text().trim()), (200, body));
}

/// A round of the event loop that programs make last looks at the listeners between
/// its turns (rounds of static answers do not): a connection that comes while the
/// one worker serves the first of two scripts in a round is accepted and answered
/// before the second script's turn, not after it.
/// Each script waits for its own gate file, so the order is the test's, not the
/// clock's: without the look the newcomer waits in the backlog until the second gate
/// opens, which the test does only once the newcomer is answered.
#[test]
fn a_long_round_accepts_a_new_connection_between_its_turns() {
    let site = Site::new();
    let (p, worker) = one_worker_behind_gates(&site);
    let gate = |n: &str| site.path(&format!("gate-{n}"));
    // Three kept-alive connections the worker holds.
    let (mut held, mut a, mut b) = (connect(p.addr), connect(p.addr), connect(p.addr));
    for c in [&mut held, &mut a, &mut b] {
        ask(c, "/hold/gate.sh?open");
        std::fs::write(gate("open"), "").unwrap();
        answered(c, "open");
    }
    // While a script holds the worker, a and b ask for a script each, and then a new
    // connection comes: its next round holds a, b and the listener, in that order.
    ask(&mut held, "/hold/gate.sh?0");
    wait_until(DEADLINE, "the worker waiting on its script", || has_child(worker).then_some(()));
    ask(&mut a, "/hold/gate.sh?1");
    ask(&mut b, "/hold/gate.sh?2");
    let mut newcomer = connect(p.addr);
    ask(&mut newcomer, "/hold/gate.sh?open");
    std::fs::write(gate("0"), "").unwrap();
    answered(&mut held, "0");
    // a's script runs now; once it is answered the round has lasted, and the
    // newcomer is taken before b's script starts.
    std::fs::write(gate("1"), "").unwrap();
    answered(&mut a, "1");
    newcomer.set_read_timeout(Some(DEADLINE)).unwrap();
    answered(&mut newcomer, "open");
    std::fs::write(gate("2"), "").unwrap();
    answered(&mut b, "2");
}

/// A round serves its connections by their last turn, oldest first, not in the
/// order `epoll` reports them (which puts a connection whose request came after the
/// last wait behind the others, though its client waited longest): with three
/// connections served in turn, b's request coming before a's while a script holds
/// the one worker, the next round serves a first. Each script waits for its own
/// gate file and the test opens only a's: served b first, the worker would wait on
/// b's script and a's answer would never come.
#[test]
fn a_round_serves_the_connection_served_longest_ago_first() {
    let site = Site::new();
    let (p, worker) = one_worker_behind_gates(&site);
    let gate = |n: &str| site.path(&format!("gate-{n}"));
    // Three kept-alive connections, served in turn: a's last turn is older than b's.
    let (mut held, mut a, mut b) = (connect(p.addr), connect(p.addr), connect(p.addr));
    std::fs::write(gate("open"), "").unwrap();
    for c in [&mut held, &mut a, &mut b] {
        ask(c, "/hold/gate.sh?open");
        answered(c, "open");
    }
    // While a script holds the worker, b asks, then a.
    ask(&mut held, "/hold/gate.sh?0");
    wait_until(DEADLINE, "the worker waiting on its script", || has_child(worker).then_some(()));
    ask(&mut b, "/hold/gate.sh?2");
    ask(&mut a, "/hold/gate.sh?1");
    std::fs::write(gate("0"), "").unwrap();
    answered(&mut held, "0");
    std::fs::write(gate("1"), "").unwrap();
    a.set_read_timeout(Some(DEADLINE)).unwrap();
    answered(&mut a, "1");
    std::fs::write(gate("2"), "").unwrap();
    answered(&mut b, "2");
}

/// A worker takes its share of the connections waiting on a listener at once, not
/// one a round: one at a time, a burst of 500 kept-alive clients took ~400 ms to
/// come in, each round serving every client taken so far (`docs/scaling.md`, "A
/// burst comes in"). One worker (its share is the whole queue): while a script
/// holds it, a kept-alive client asks for a script behind a shut gate and two new
/// connections come, the first asking for a page, the second for a script whose
/// gate is open. The round after the wait takes both before the kept-alive
/// client's turn, so the second is answered; taking one, the round would turn to
/// the kept-alive client's script next, and the second would wait in the backlog
/// behind a gate the test opens only after it.
#[test]
fn a_worker_takes_the_connections_waiting_on_a_listener_at_once() {
    let site = Site::new();
    let (p, worker) = one_worker_behind_gates(&site);
    let gate = |n: &str| site.path(&format!("gate-{n}"));
    let (mut held, mut kept) = (connect(p.addr), connect(p.addr));
    std::fs::write(gate("open"), "").unwrap();
    for c in [&mut held, &mut kept] {
        ask(c, "/hold/gate.sh?open");
        answered(c, "open");
    }
    ask(&mut held, "/hold/gate.sh?0");
    wait_until(DEADLINE, "the worker waiting on its script", || has_child(worker).then_some(()));
    ask(&mut kept, "/hold/gate.sh?shut");
    let mut page = connect(p.addr);
    ask(&mut page, "/");
    let mut second = connect(p.addr);
    ask(&mut second, "/hold/gate.sh?2");
    std::fs::write(gate("2"), "").unwrap();
    std::fs::write(gate("0"), "").unwrap();
    answered(&mut held, "0");
    assert_eq!(read_response(&mut page, false).expect("the page").status, 200);
    second.set_read_timeout(Some(DEADLINE)).unwrap();
    answered(&mut second, "2");
    std::fs::write(gate("shut"), "").unwrap();
    answered(&mut kept, "shut");
}

#[test]
fn a_killed_worker_is_replaced_and_named() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 3\nmin_spare = 1\nmax_spare = 5\n");
    let p = Pika::start(&site, "-F");
    let before = n_children(p.pid, 3);
    let victim = before[1];
    // Let it live past the young-death guard, then kill it.
    std::thread::sleep(Duration::from_millis(1100));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL).unwrap();
    let t = Instant::now();
    let after = wait_until(Duration::from_secs(5), "a replacement worker", || {
        let w = workers(&p);
        (w.len() == 3 && !w.contains(&victim)).then_some(w)
    });
    assert!(t.elapsed() < Duration::from_secs(3), "replaced within 2 ticks, took {:?}", t.elapsed());
    assert_eq!(after.iter().filter(|p| before.contains(p)).count(), 2);
    let log = site.error_log();
    assert!(log.contains(&format!("worker {victim} (slot")) && log.contains("killed by signal SIGKILL"), "{log}");
    assert_eq!(get(p.addr, "/").status, 200);
}

/// A connection that comes as a worker is killed: the kernel may wake only the dying
/// worker for it (`EPOLLEXCLUSIVE`), and nothing else wakes for it while the server is
/// quiet; the others look at the listeners once a second. Without that look, a round
/// here waited out the read timeout in about a third of the rounds on a loaded machine
/// (and in no round on a quiet one: the dying worker must be slow to run to its end).
#[test]
fn a_request_that_comes_as_a_worker_is_killed_is_answered() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 4\nmin_spare = 1\nmax_spare = 4\n");
    let p = Pika::start(&site, "-F");
    n_children(p.pid, 4);
    for round in 0..3 {
        let victim = workers(&p)[0];
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::SIGKILL).unwrap();
        let t = Instant::now();
        let mut s = connect(p.addr);
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let r = read_response(&mut s, false);
        assert_eq!(r.map(|r| r.status), Some(200), "round {round}: no answer after {:?}", t.elapsed());
        wait_until(DEADLINE, "the killed worker reaped", || (!workers(&p).contains(&victim)).then_some(()));
    }
}

#[test]
fn max_requests_recycles_workers_without_errors() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax_requests = 5\n");
    let p = Pika::start(&site, "-F");
    let first = n_children(p.pid, 2);
    // Keep-alive: the fifth response of a worker says close, and the client reconnects.
    let mut served = 0;
    while served < 40 {
        let mut s = connect(p.addr);
        loop {
            s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
            let r = read_response(&mut s, false).expect("a response, never a reset");
            assert_eq!(r.status, 200);
            served += 1;
            if r.header("connection").as_deref() == Some("close") || served >= 40 {
                break;
            }
        }
    }
    for _ in 0..20 {
        assert_eq!(get(p.addr, "/").status, 200);
    }
    let now = workers(&p);
    assert!(first.iter().all(|w| !now.contains(w)), "every first worker was replaced: {first:?} -> {now:?}");
}

#[test]
fn reloads_under_load_drop_nothing_and_apply_the_new_config() {
    let site = Site::new();
    site.write("htdocs/v.txt", "old");
    site.write("htdocs2/v.txt", "new");
    let conf =
        |root: &str| format!("[workers]\nstart = 3\nmin_spare = 2\nmax_spare = 6\n[[vhost]]\nroot = \"{root}\"\n");
    site.config("", &conf("htdocs"));
    let p = Pika::start(&site, "-F");
    let addr = p.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut loops = Vec::new();
    for keepalive in [false, true, false] {
        let (stop, ok) = (stop.clone(), ok.clone());
        loops.push(std::thread::spawn(move || -> Vec<String> {
            let mut failures = Vec::new();
            let mut conn: Option<TcpStream> = None;
            while !stop.load(Ordering::Relaxed) {
                let mut s = match conn.take() {
                    Some(s) => s,
                    None => connect(addr),
                };
                let close = if keepalive { "" } else { "Connection: close\r\n" };
                if let Err(e) = s.write_all(format!("GET /v.txt HTTP/1.1\r\nHost: localhost\r\n{close}\r\n").as_bytes())
                {
                    failures.push(format!("write: {e}"));
                    continue;
                }
                match read_response(&mut s, false) {
                    Some(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        if keepalive && r.header("connection").is_none() {
                            conn = Some(s);
                        }
                    }
                    Some(r) => failures.push(format!("status {}", r.status)),
                    None => failures.push("no response (reset or closed)".into()),
                }
            }
            failures
        }));
    }
    for i in 0..20 {
        if i == 19 {
            site.config("", &conf("htdocs2"));
        }
        let before = n(&status(&site), "generation");
        p.signal(SIGHUP);
        wait_status(&site, "a new generation", DEADLINE, |s| n(s, "generation") == before + 1);
        std::thread::sleep(Duration::from_millis(150));
    }
    // A broken config is refused and the server keeps serving.
    std::fs::write(site.path("conf/pika.toml"), "[server]\nlisten = [\"127.0.0.1:0\"]\nbogus = 1\n").unwrap();
    let gen_before = n(&status(&site), "generation");
    p.signal(SIGHUP);
    wait_until(DEADLINE, "the reload error", || site.error_log().contains("reload failed").then_some(()));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = loops.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(failures.is_empty(), "{} failures, e.g. {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert!(ok.load(Ordering::Relaxed) > 100, "the client loops ran");
    assert_eq!(n(&status(&site), "generation"), gen_before, "a broken config starts no generation");
    // Every worker is of the last generation and serves the new root.
    wait_status(&site, "old generation gone", DEADLINE, |s| n(s, "old_generation") == 0);
    for _ in 0..30 {
        assert_eq!(get(p.addr, "/v.txt").text(), "new");
    }
}

#[test]
fn new_generation_workers_survive_the_old_ones_retirement() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 3\nmin_spare = 1\nmax_spare = 8\n");
    let p = Pika::start(&site, "-F");
    let old = n_children(p.pid, 3);
    p.signal(SIGHUP);
    let new = wait_until(DEADLINE, "the old workers to leave", || {
        let w = workers(&p);
        (w.iter().all(|x| !old.contains(x)) && w.len() == 3).then_some(w)
    });
    // Several ticks later the same new workers are all still there.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(workers(&p), new);
}

#[test]
fn graceful_stop_lets_a_download_finish() {
    let site = Site::new();
    let data: Vec<u8> = (0..40_000_000u32).map(|i| (i % 253) as u8).collect();
    site.write("htdocs/big.bin", &data);
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    let mut p = Pika::start(&site, "-F");
    let pids = n_children(p.pid, 2);
    let mut s = connect(p.addr);
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut got = vec![0u8; 1 << 20];
    s.read_exact(&mut got).unwrap();
    p.signal(SIGQUIT);
    // Read the rest slowly at first, so the stop really happens mid-download.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(alive(p.pid), "the master waits for the download");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    got.extend_from_slice(&rest);
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(got[head_end..] == data[..], "the whole file arrived");
    assert_eq!(p.wait_exit(DEADLINE), Some(0));
    for w in pids {
        assert!(!alive(w), "worker {w} outlived the master");
    }
}

#[test]
fn killing_the_master_takes_the_workers_and_frees_the_port() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 3\nmin_spare = 1\nmax_spare = 5\n");
    let mut p = Pika::start(&site, "-F");
    let pids = n_children(p.pid, 3);
    p.signal(SIGKILL);
    p.wait_exit(DEADLINE);
    // PR_SET_PDEATHSIG: each worker gets its TERM as the master dies.
    wait_until(Duration::from_secs(2), "every worker to die within 2 s of the master", || {
        pids.iter().all(|w| !alive(*w)).then_some(())
    });
    TcpListener::bind(p.addr).expect("the port is free");
}

#[test]
fn a_stuck_worker_is_killed() {
    let site = Site::new();
    hold_script(&site);
    // min_spare 2: the pool keeps two idle workers besides the stuck one, and
    // refills once it is gone.
    site.config(
        "",
        &format!("[workers]\nstart = 2\nmin_spare = 2\nmax_spare = 3\n[http]\nrequest_timeout = \"2s\"\n{HOLD}"),
    );
    let p = Pika::start(&site, "-F");
    let mut s = connect(p.addr);
    s.write_all(HOLD_GET).unwrap();
    // The worker waits on its script until the watchdog kills it.
    let line = wait_until(DEADLINE, "the watchdog", || {
        site.error_log().lines().find(|l| l.contains("made no progress")).map(str::to_string)
    });
    assert!(line.contains("GET /hold/sleep.sh HTTP/1.1"), "{line}");
    let stuck: i32 = line.split("worker ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).expect(&line);
    // Killed, reaped, and the pool has its idle workers again without it.
    wait_until(Duration::from_secs(5), "the stuck worker gone", || (!alive(stuck)).then_some(()));
    // The TERM ended it (its handler writes what the worker holds): no KILL was needed.
    assert!(!site.error_log().contains("after TERM; killing it"), "{}", site.error_log());
    wait_status(&site, "two idle workers again", DEADLINE, |st| in_state(st, "ready") >= 2);
    let now = workers(&p);
    assert!(!now.contains(&stuck) && now.len() >= 2, "{stuck} still among {now:?}");
    // The client sees the end of the stream.
    let got = read_until_closed(&mut s, DEADLINE);
    assert!(got.is_empty(), "an answer came from a killed worker");
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_stuck_workers_request_line_is_escaped_in_the_error_log() {
    let site = Site::new();
    hold_script(&site);
    site.config("", &format!("[workers]\nstart = 2\nmin_spare = 1\n[http]\nrequest_timeout = \"2s\"\n{HOLD}"));
    let p = Pika::start(&site, "-F");
    let mut s = connect(p.addr);
    // A C1 control (CSI, U+009B) and a right-to-left override (U+202E) in the query.
    s.write_all(b"GET /hold/sleep.sh?\xc2\x9b\xe2\x80\xae HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    // The worker waits on its script until the watchdog sees it stuck.
    let log = wait_until(DEADLINE, "the watchdog", || {
        let log = std::fs::read(site.path("logs/error.log")).unwrap_or_default();
        log.windows(17).any(|w| w == b"made no progress ").then_some(log)
    });
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("made no progress on \"GET /hold/sleep.sh?\\xc2\\x9b\\xe2\\x80\\xae HTTP/1.1\""), "{text}");
    assert!(!log.windows(2).any(|w| w == b"\xc2\x9b"), "a raw C1 byte reached the error log");
    drop(s);
    assert_eq!(get(p.addr, "/").status, 200);
}

/// True while `pid` is blocked in the system call `nr` (from /proc/PID/syscall).
fn blocked_in(pid: i32, nr: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<i64>().ok())
        .is_some_and(|n| n == nr)
}

fn send_signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

/// A site whose workers hold access-log records for an hour, with a script that
/// sleeps. One event loop (the workers bound to one CPU): a kept-alive connection
/// has no other loop to go home to, so one worker holds all its records.
fn holding_site(http: &str) -> (Site, Pika) {
    let site = Site::new();
    hold_script(&site);
    let cpu = allowed_cpus()[0];
    site.config(
        "",
        &format!(
            "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\ncpu_affinity = [{cpu}]\n[http]\nheader_timeout = \"60s\"\n{http}\n\
             [[access_log]]\npath = \"logs/access.log\"\nflush = \"1h\"\n{HOLD}"
        ),
    );
    let p = Pika::start(&site, "-F");
    (site, p)
}

/// Three requests answered on one kept-alive connection (so one worker holds their
/// records: the log keeps its `lines` lines), then `next` sent on it.
fn three_held_then(site: &Site, p: &Pika, lines: usize, next: &[u8]) -> TcpStream {
    let mut s = connect(p.addr);
    for _ in 0..3 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s, false).expect("a response").status, 200);
    }
    assert_eq!(site.access_lines().len(), lines, "the records are held");
    s.write_all(next).unwrap();
    s
}

#[test]
fn the_watchdog_terminates_a_stuck_worker_so_its_held_records_are_written() {
    let (site, p) = holding_site("request_timeout = \"2s\"");
    let _s = three_held_then(&site, &p, 0, HOLD_GET);
    // Stopped while it waits on the script (within its first second, before it
    // would write its records itself), the worker makes no progress: the watchdog's
    // case. It is let go once the watchdog has acted.
    let worker = held_worker(&p);
    send_signal(worker, nix::sys::signal::Signal::SIGSTOP);
    wait_until(DEADLINE, "the watchdog", || site.error_log().contains("made no progress").then_some(()));
    send_signal(worker, nix::sys::signal::Signal::SIGCONT);
    // TERM, not KILL: its handler wrote the three records it held.
    let lines = wait_until(DEADLINE, "the held records", || Some(site.access_lines()).filter(|l| l.len() >= 3));
    assert_eq!(lines.len(), 3, "{lines:?}");
    wait_until(DEADLINE, "the stuck worker gone", || (!alive(worker)).then_some(()));
}

#[test]
fn a_stuck_worker_that_outlives_its_term_is_killed_after_a_grace() {
    let (site, p) = holding_site("request_timeout = \"2s\"");
    let _s = three_held_then(&site, &p, 0, HOLD_GET);
    let worker = held_worker(&p);
    // Stopped for good: TERM cannot act on it.
    send_signal(worker, nix::sys::signal::Signal::SIGSTOP);
    wait_until(DEADLINE, "the TERM", || site.error_log().contains("terminating it").then_some(()));
    wait_until(DEADLINE, "the stuck worker gone", || (!alive(worker)).then_some(()));
    let log = site.error_log();
    // The KILL waited out the grace (3 s) after the TERM: by the lines' own times.
    let at = |what: &str| {
        let line = log.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} in {log}"));
        let hms = line.split(' ').nth(1).expect(line);
        hms.split(':').map(|f| f.parse::<f64>().expect(line)).fold(0.0, |t, f| t * 60.0 + f)
    };
    let grace = (at("after TERM; killing it") - at("terminating it")).rem_euclid(86_400.0);
    assert!(grace >= 2.9, "killed {grace:.3} s after the TERM:\n{log}");
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_worker_waiting_on_a_script_writes_its_held_records_first() {
    let (site, p) = holding_site("");
    // A script that keeps its worker: once it has waited a second, the worker
    // writes what it holds (no timeout, no kill: the script is merely slow). (A head
    // that stops halfway, or a client that stops reading, holds no worker: it waits
    // in the worker's set while the worker serves others.)
    let _unread = three_held_then(&site, &p, 0, HOLD_GET);
    wait_until(DEADLINE, "the held records", || (site.access_lines().len() == 3).then_some(()));
}

#[test]
fn ttin_and_ttou_move_the_spare_band() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 2\nmax_spare = 4\n");
    let p = Pika::start(&site, "-F");
    // Pending signals of one kind merge: send each after the last was seen.
    let step = |sig: i32, min: u32, max: u32| {
        let line = format!("min_spare {min}, max_spare {max}\n");
        let before = site.error_log().matches(&line).count();
        p.signal(sig);
        wait_until(DEADLINE, &line, || (site.error_log().matches(&line).count() > before).then_some(()));
    };
    step(21, 3, 5); // SIGTTIN: both ends move up by one
    step(21, 4, 6);
    step(21, 5, 7);
    wait_status(&site, "5 workers", DEADLINE, |s| n(s, "workers") == 5);
    step(22, 4, 6); // SIGTTOU
    step(22, 3, 5);
    step(22, 2, 4);
    step(22, 1, 3);
    wait_status(&site, "back to 3 workers", DEADLINE, |s| n(s, "workers") == 3);
    // min_spare stops at 0, and max_spare stays above it.
    step(22, 0, 2);
    step(22, 0, 1);
    step(22, 0, 1);
}

/// Idle workers wait in `epoll` with `EPOLLEXCLUSIVE` and the oldest sleeping one is
/// woken first, so a client's connections one after another go to one or two workers,
/// not round the whole pool as blocking `accept()` hands them out (first-in,
/// first-out: each of the 8 would serve 1/8; seen: [6, 5, 5, 5, 5, 5, 5, 4]).
#[test]
fn sequential_connections_stay_on_the_hot_workers() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 8\nmin_spare = 1\nmax_spare = 8\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"%P\"\n",
    );
    let p = Pika::start(&site, "-F");
    wait_status(&site, "8 ready workers", DEADLINE, |s| n(s, "workers") == 8 && s.contains("ready 8"));
    const N: usize = 40;
    for _ in 0..N {
        assert_eq!(get(p.addr, "/").status, 200);
    }
    let lines = wait_until(DEADLINE, "40 log records", || {
        let l = site.access_lines();
        (l.len() >= N).then_some(l)
    });
    let mut per_pid = std::collections::HashMap::<String, usize>::new();
    for l in &lines {
        *per_pid.entry(l.clone()).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_pid.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    // A worker still logging its last request when the next connection comes is
    // not asleep, so the next oldest takes that one. Round-robin would give the
    // busiest two 10 of 40.
    let top_two: usize = counts.iter().take(2).sum();
    assert!(top_two >= N / 2, "requests per worker: {counts:?}");
    assert_eq!(workers(&p).len(), 8);
}

/// Waits until the master has rewritten its status file `n` times (once a tick).
fn wait_ticks(site: &Site, n: usize) {
    let written = || std::fs::metadata(site.status_file()).and_then(|m| m.modified()).ok();
    for _ in 0..n {
        let before = written();
        wait_until(DEADLINE, "a tick", || (written() != before).then_some(()));
    }
}

#[test]
fn graceful_timeout_cuts_what_outlasts_it_then_the_master_exits() {
    let site = Site::new();
    hold_script(&site);
    site.config(
        "graceful_timeout = \"2s\"",
        &format!("[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n{HOLD}"),
    );
    let mut p = Pika::start(&site, "-F");
    // Two scripts that sleep: each holds one of the two workers.
    let clients: Vec<TcpStream> = (0..2).map(|_| slow_client(p.addr)).collect();
    let pids = wait_until(DEADLINE, "both workers waiting on their scripts", || {
        let w = n_children(p.pid, 2);
        w.iter().all(|&w| blocked_in(w, libc::SYS_poll) && has_child(w)).then_some(w)
    });
    // One is stopped: TERM cannot end it, only the KILL that follows.
    let (termed, stopped) = (pids[0], pids[1]);
    send_signal(stopped, nix::sys::signal::Signal::SIGSTOP);
    let quit = Instant::now();
    p.signal(SIGQUIT);
    let mut gone: [Option<Duration>; 2] = [None, None];
    let status = wait_until(DEADLINE, "the master to exit", || {
        for (i, w) in [termed, stopped].into_iter().enumerate() {
            if gone[i].is_none() && !alive(w) {
                gone[i] = Some(quit.elapsed());
            }
        }
        p.child.try_wait().ok().flatten()
    });
    let took = quit.elapsed();
    let (termed_at, killed_at) = (gone[0].expect("the first worker ended"), gone[1].expect("the stopped one ended"));
    // Nothing is cut before graceful_timeout (2 s); the TERM follows it, and the KILL
    // comes STOP_GRACE (3 s) after the TERM.
    assert!(termed_at >= Duration::from_millis(1900), "a download cut after {termed_at:?}");
    assert!(killed_at >= Duration::from_millis(4900), "the stopped worker was killed after {killed_at:?}");
    assert!(took >= killed_at, "the master left before its workers ({took:?})");
    assert_eq!(status.code(), Some(0), "{status}");
    let log = site.error_log();
    assert_eq!(log.matches("graceful stop timed out after 2s").count(), 1, "{log}");
    // Each client got the end of the stream.
    for mut c in clients {
        let got = read_until_closed(&mut c, DEADLINE);
        assert!(got.is_empty(), "an answer arrived: {:?}", String::from_utf8_lossy(&got));
    }
}

/// A worker of the old generation that stays idle after a reload (stopped here while
/// it waits for work) is not one of the spares: counted as idle, it would make the
/// pool look over `max_spare` and a new worker would be retired for it.
#[test]
fn idle_workers_are_counted_in_the_current_generation_only() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 6\n");
    let p = Pika::start(&site, "-F");
    let old = n_children(p.pid, 2);
    send_signal(old[0], nix::sys::signal::Signal::SIGSTOP);
    p.signal(SIGHUP);
    let new = wait_until(DEADLINE, "two workers of the new generation, the other old one gone", || {
        let w = children_of(p.pid);
        let new: Vec<i32> = w.iter().copied().filter(|x| !old.contains(x)).collect();
        (new.len() == 2 && !w.contains(&old[1])).then_some(new)
    });
    wait_status(&site, "the new generation ready", DEADLINE, |s| n(s, "current_generation_ready") == 2);
    let retiring = || site.error_log().matches("maintenance: retiring").count();
    let before = retiring();
    // Three looks at the pool: 2 idle of the current generation is inside the band.
    wait_ticks(&site, 3);
    assert_eq!(retiring(), before, "a spare retired:\n{}", site.error_log());
    let mut now = children_of(p.pid);
    now.sort();
    let mut want = [vec![old[0]], new].concat();
    want.sort();
    assert_eq!(now, want, "the pool changed");
    // Let go, the old worker sees the new generation and leaves.
    send_signal(old[0], nix::sys::signal::Signal::SIGCONT);
    wait_until(DEADLINE, "the old worker gone", || (!alive(old[0])).then_some(()));
}

#[test]
fn a_graceful_stop_and_a_winch_wake_idle_workers_with_dummy_requests() {
    for sig in [SIGQUIT, 28] {
        let site = Site::new();
        site.config(
            "",
            "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n\
             [[access_log]]\npath = \"logs/internal.log\"\nbuffer = 0\nexclude = []\ninclude = [{ internal = true }]\n",
        );
        let p = Pika::start(&site, "-F");
        n_children(p.pid, 2);
        p.signal(sig);
        wait_until(DEADLINE, "the idle workers gone", || children_of(p.pid).is_empty().then_some(()));
        let log = site.read("logs/internal.log");
        assert!(log.contains("internal dummy connection"), "signal {sig}: no dummy request woke them: {log:?}");
    }
}

#[test]
fn the_masters_dummy_requests_are_left_out_of_every_counter() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\n\
         [[access_log]]\npath = \"logs/access.log\"\n\
         [[access_log]]\npath = \"logs/internal.log\"\nbuffer = 0\nexclude = []\ninclude = [{ internal = true }]\n",
    );
    let p = Pika::start(&site, "-F");
    // Five requests on one connection; the bytes each answer took on the wire.
    let mut s = connect(p.addr);
    let mut bytes = 0;
    for _ in 0..5 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).expect("a response");
        assert_eq!(r.status, 200);
        bytes += r.head.len() + r.body.len();
    }
    drop(s);
    // A steady pool gets none: no older generation to wake, nothing stopping.
    wait_ticks(&site, 3);
    let dummies = || site.read("logs/internal.log").matches("internal dummy connection").count();
    assert_eq!(dummies(), 0, "dummy requests with nobody to wake");
    // Reloads wake the old generation's idle workers with dummy requests.
    for generation in 1..=2 {
        p.signal(SIGHUP);
        wait_status(&site, "the reload", DEADLINE, |s| n(s, "generation") == generation);
    }
    wait_until(DEADLINE, "dummy requests answered", || (dummies() >= 2).then_some(()));
    wait_ticks(&site, 1);
    let status = site.status();
    assert_eq!(n(&status, "requests"), 5, "{status}");
    assert_eq!(n(&status, "bytes"), bytes as u64, "{status}");
    // Nor does the access log of traffic show them.
    let lines = wait_until(DEADLINE, "five access-log lines", || {
        let l = site.access_lines();
        (l.len() >= 5).then_some(l)
    });
    assert_eq!(lines.len(), 5, "{lines:?}");
}

/// A worker that dies young (here: killed as soon as it appears) is not replaced at
/// once but by the spawn rate, which starts at one a tick: a worker that cannot
/// live must not become a fork loop.
#[test]
fn workers_that_die_young_are_replaced_at_the_spawn_rate_not_at_once() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 2\nmax_spare = 4\nmax = 64\n");
    let p = Pika::start(&site, "-F");
    let mut killed = std::collections::HashSet::new();
    // Every worker killed as it appears, until the master says it is busy: at the
    // fourth tick short of idle workers, when the rate doubled to 8.
    let started = Instant::now();
    let note = wait_until(DEADLINE, "the busy note", || {
        for w in children_of(p.pid) {
            if killed.insert(w) {
                send_signal(w, nix::sys::signal::Signal::SIGKILL);
            }
        }
        site.error_log().lines().find(|l| l.contains("server seems busy")).map(str::to_string)
    });
    eprintln!("{} workers forked in {:?}, each killed at once", killed.len(), started.elapsed());
    assert!(note.contains("spawning 8 workers"), "said at a rate of 8, not before: {note}");
    // Forked by then: the first 2, then 1, 2, 4 and 8 at four ticks (17). Replaced at
    // once, every kill would have forked again: hundreds in those four seconds.
    assert!(killed.len() <= 40, "{} workers forked in {:?}", killed.len(), started.elapsed());
    assert!(killed.len() >= 4, "the pool was not refilled: {} workers", killed.len());
    // Left alone, the pool comes back and serves.
    wait_status(&site, "two ready workers", DEADLINE, |s| in_state(s, "ready") >= 2);
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_reload_that_lowers_max_below_busy_old_workers_keeps_serving() {
    let site = Site::new();
    hold_script(&site);
    let pool = |max: u32| format!("[workers]\nstart = {max}\nmin_spare = 1\nmax_spare = {max}\nmax = {max}\n{HOLD}");
    site.config("", &pool(4));
    let p = Pika::start(&site, "-F");
    // Four scripts hold the four workers, slots 0 to 3.
    let held: Vec<TcpStream> = (0..4).map(|_| slow_client(p.addr)).collect();
    wait_status(&site, "four workers busy", DEADLINE, |s| in_state(s, "reading") == 4);
    // Max lowered to 3 while they still send: the old worker in slot 3 is past the
    // new max, and the new generation finds no free slot until one of them leaves.
    site.config("", &pool(3));
    p.signal(SIGHUP);
    wait_until(DEADLINE, "the reload", || site.error_log().contains("reloaded ").then_some(()));
    wait_ticks(&site, 2);
    drop(held);
    // (The new generation had no slot to start in: maintenance forks what
    // min_spare asks for.)
    wait_status(&site, "the old generation gone, a new worker ready", DEADLINE, |s| {
        n(s, "old_generation") == 0 && in_state(s, "ready") >= 1
    });
    assert!(children_of(p.pid).len() <= 3, "max is 3 now");
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn winch_retires_every_worker_and_hup_brings_the_pool_back() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    let p = Pika::start(&site, "-F");
    p.signal(28); // SIGWINCH
    wait_status(&site, "no worker", DEADLINE, |s| n(s, "workers") == 0);
    assert_eq!(n_children(p.pid, 0), Vec::<i32>::new());
    // Paused: no look at the pool forks one.
    wait_ticks(&site, 2);
    assert!(children_of(p.pid).is_empty(), "a worker was forked while paused");
    p.signal(SIGHUP);
    let started = n_children(p.pid, 2);
    wait_status(&site, "two ready workers", DEADLINE, |s| n(s, "current_generation_ready") == 2);
    assert_eq!(get(p.addr, "/").status, 200);
    // Maintenance runs again: a worker that dies (past its first second) is replaced.
    std::thread::sleep(Duration::from_millis(1100));
    send_signal(started[0], nix::sys::signal::Signal::SIGKILL);
    wait_until(DEADLINE, "a replacement", || {
        let w = children_of(p.pid);
        (w.len() == 2 && !w.contains(&started[0])).then_some(())
    });
}

/// Writes the site's config with these `listen` addresses (and the defaults of
/// `Site::config` otherwise).
fn config_listening(site: &Site, listen: &[&str]) {
    let list: Vec<String> = listen.iter().map(|a| format!("\"{a}\"")).collect();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    let text =
        site.read("conf/pika.toml").replace("listen = [\"127.0.0.1:0\"]", &format!("listen = [{}]", list.join(", ")));
    std::fs::write(site.path("conf/pika.toml"), text).unwrap();
}

/// A port nothing listens on right now.
#[test]
fn reloads_add_and_remove_listen_addresses_and_keep_them_when_one_cannot_be_bound() {
    let site = Site::new();
    let first = "127.0.0.1:0";
    config_listening(&site, &[first]);
    let p = Pika::start(&site, "-F");
    let a = p.addr;
    let reload = |generation: u64| {
        p.signal(SIGHUP);
        wait_status(&site, "the new generation", DEADLINE, |s| n(s, "generation") == generation);
    };
    // Added: bound at the reload, served by the new generation; the first stays.
    let b: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config_listening(&site, &[first, &b.to_string()]);
    reload(1);
    assert!(site.error_log().contains(&format!("listening on {b}")), "{}", site.error_log());
    assert_eq!(get(b, "/").status, 200);
    assert_eq!(get(a, "/").status, 200);
    // Removed: once the old generation is gone nobody holds the socket any more.
    config_listening(&site, &[&b.to_string()]);
    reload(2);
    assert!(site.error_log().contains(&format!("no longer listening on {a}")), "{}", site.error_log());
    wait_status(&site, "the old generation gone", DEADLINE, |s| n(s, "old_generation") == 0);
    wait_until(DEADLINE, "the removed address to refuse connections", || TcpStream::connect(a).err());
    assert_eq!(get(b, "/").status, 200);
    // An address that cannot be bound (this test holds it): the reload fails, said
    // once, and the server goes on as it was.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = taken.local_addr().unwrap();
    config_listening(&site, &[&b.to_string(), &c.to_string()]);
    p.signal(SIGHUP);
    wait_until(DEADLINE, "the reload error", || site.error_log().contains("reload failed").then_some(()));
    wait_ticks(&site, 2);
    let log = site.error_log();
    assert_eq!(log.matches("reload failed").count(), 1, "{log}");
    assert!(log.contains(&format!("cannot listen on {c}")), "{log}");
    assert_eq!(n(&status(&site), "generation"), 2, "a failed reload starts no generation");
    assert_eq!(get(b, "/").status, 200);
    // It kept its listener: the next good reload reuses it (binding it again would
    // fail while the workers hold it) and serves on it.
    drop(taken);
    config_listening(&site, &[&b.to_string()]);
    reload(3);
    wait_status(&site, "the old generation gone", DEADLINE, |s| n(s, "old_generation") == 0);
    assert_eq!(get(b, "/").status, 200);
    assert_eq!(site.error_log().matches("reload failed").count(), 1);
}
