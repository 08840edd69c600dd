#!/usr/bin/env python3
"""Benchmark orchestration for pika and its peers (called by bench/run).

What it does, in order:
  1. writes the shared docroot (deterministic bytes, same files for everyone);
  2. for each round (the servers in turn, A B C ..., in reverse order every
     other round, so slow drifts of the machine hit every server alike):
       a. "cold burst": for each server in turn, start a fresh instance, fire
          ab at it the moment its port accepts, note start-up time, failures
          and duration, stop it;
       b. start one more fresh instance of every server (each on its own
          port), check it serves the right bytes, let it settle, sample idle
          memory; then, workload by workload, every server in turn runs the
          workload while its memory is sampled, so one cell's figures are
          taken within a minute or two of each other (a server sized per
          cell, the floor, gets a fresh instance where a workload wants
          another worker count: Server.workers_for); stop them all;
  3. writes OUT/results.json after every cell (so a cut-short run still has
     data for report.py).

Safety: every server runs from a config generated in the run's temp dir, on
its own 127.0.0.1 port; nothing under /etc is read for writing or changed.
Every process we start is remembered by pid (servers get their own session,
so their pgid == their pid) and stopped on exit, including Ctrl-C/SIGTERM.
Clients are bounded in time (their own duration plus a hard wall-clock
limit enforced here).
"""
import argparse
import datetime
import hashlib
import http.client
import json
import os
import platform
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import scripted

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
# PIKA_BIN may point at another build (e.g. a copy of an older release).
PIKA_BIN = os.environ.get("PIKA_BIN") or os.path.join(REPO_DIR, "target", "release", "pika")

ALL_SERVERS = ["nginx", "nginx-buffered", "apache", "apache-buffered", "lighttpd", "h2o",
               "caddy", "busybox", "pika", "floor"]
ALIASES = {"apache2": "apache", "httpd": "apache", "busybox-httpd": "busybox"}
PORT_BASE = int(os.environ.get("BENCH_PORT_BASE", "18080"))
# A server's HTTPS port is its port plus this.
TLS_PORT_OFFSET = 1000
# The HTTPS cells' certificate and key (ECDSA P-256, made by make_cert).
CERT = KEY = None
# pika's PROXY protocol listener is its port plus this
PROXY_PORT_OFFSET = 2000
NPROC = os.cpu_count() or 1
HOST = "127.0.0.1"  # all traffic stays on loopback

# Descriptors. The largest visitors cell (3,000 clients, six connections each)
# holds up to 18,000 connections, and every server is configured to hold them
# (nginx in any one worker, lighttpd as far as its own rule lets it, pika through
# server.max_open_files). bench/run raises the soft limit to the hard one; no
# process here can go past the hard limit (that takes CAP_SYS_RESOURCE), so the
# configs use it, capped at lighttpd's 16-bit server.max-fds.
_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
NOFILE = 65535 if _hard == resource.RLIM_INFINITY else min(_hard, 65535)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------
# Docroot: deterministic content (SHAKE-256 of a fixed label, so the bytes do
# not depend on the Python version's random module).
# --------------------------------------------------------------------------
FILES = [
    # name, size in bytes (decimal KB/MB, as in the issue), kind
    ("index.html", 1400, "html"),
    ("page17.html", 1700, "html"),
    ("page50.html", 50_000, "html"),
    ("img200.jpg", 200_000, "jpeg"),
    ("img1700.jpg", 1_700_000, "jpeg"),
]
ASSET_FILES = [
    # The ten assets of the page a visitor loads (the visitors cells): sizes of a
    # real page's stylesheets, scripts, images and font (3-50 KB, 219 KB in all),
    # names whose types the mime table of every server in those cells maps
    # (busybox, which sits them out, has no type for .woff2).
    ("site.css", 22_000, "css"),
    ("print.css", 3_000, "css"),
    ("app.js", 48_000, "js"),
    ("vendor.js", 36_000, "js"),
    ("consent.js", 5_000, "js"),
    ("logo.svg", 4_000, "svg"),
    ("icons.png", 9_000, "png"),
    ("hero.jpg", 50_000, "jpeg"),
    ("photo.jpg", 18_000, "jpeg"),
    ("text.woff2", 24_000, "woff2"),
]
FILES += ASSET_FILES
ASSETS = [name for name, _, _ in ASSET_FILES]

# The Content-Type each kind must be served with (a prefix; nginx's mime.types
# says application/javascript where the others say text/javascript).
TYPES = {"html": "text/html", "jpeg": "image/jpeg", "css": "text/css",
         "js": ("text/javascript", "application/javascript"), "svg": "image/svg+xml",
         "png": "image/png", "woff2": "font/woff2"}

WORDS = ("pika prefork worker accept socket header request response static "
         "file server kernel cache latency bytes route host alpine stone "
         "meadow burrow whistle summit").split()


def stream(label, n):
    return hashlib.shake_256(("pika-bench:" + label).encode()).digest(n)


def filler(name, need):
    """`need` bytes of seeded words, a line break every 12."""
    rnd = stream(name, need)
    words, n, i = [], 0, 0
    while n < need:
        w = WORDS[rnd[i % len(rnd)] % len(WORDS)]
        i += 1
        sep = "\n" if i % 12 == 0 else " "
        words.append(w + sep)
        n += len(w) + 1
    return "".join(words)[:need]


def make_text(name, size, head, tail):
    data = (head + filler(name, size - len(head) - len(tail)) + tail).encode()
    assert len(data) == size, (name, len(data))
    return data


def make_html(name, size):
    return make_text(name, size,
                     f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                     f"<title>pika bench {name}</title></head>\n<body>\n<p>",
                     "</p>\n</body></html>\n")


def make_binary(name, size, header, trailer=b""):
    # A real header, seeded filler, a real trailer. Not a decodable file (the
    # servers never decode one), but the right name, type and size.
    return header + stream(name, size - len(header) - len(trailer)) + trailer


def make_file(name, size, kind):
    if kind == "html":
        return make_html(name, size)
    if kind == "css":
        return make_text(name, size, f"/* pika bench {name} */\n.x {{ content: \"", "\" }\n")
    if kind == "js":
        return make_text(name, size, f"// pika bench {name}\nconst s = `", "`;\n")
    if kind == "svg":
        return make_text(name, size, '<svg xmlns="http://www.w3.org/2000/svg"><desc>',
                         "</desc></svg>\n")
    if kind == "jpeg":  # SOI + JFIF APP0 header ... EOI
        return make_binary(name, size, bytes.fromhex("ffd8ffe000104a46494600010100000100010000"),
                           b"\xff\xd9")
    if kind == "png":  # signature ... IEND chunk
        return make_binary(name, size, b"\x89PNG\r\n\x1a\n",
                           bytes.fromhex("0000000049454e44ae426082"))
    if kind == "woff2":
        return make_binary(name, size, b"wOF2\x00\x01\x00\x00")
    raise ValueError(kind)


def write_docroot(docroot):
    os.makedirs(docroot, exist_ok=True)
    info = {}
    for name, size, kind in FILES:
        data = make_file(name, size, kind)
        assert len(data) == size, (name, len(data))
        path = os.path.join(docroot, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o644)
        info[name] = {"bytes": size, "sha256": hashlib.sha256(data).hexdigest(),
                      "kind": kind}
    return info


# --------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------
# A visitor's kept-alive connections (a browser's six per host), and how long a
# request may take, connecting and a retry included, before it counts as failed
# (ab's -s 10 in the other cells).
VISITOR_CONNS = 6
VISITOR_TIMEOUT = 10
VISITORS_BIN = None  # set from --visitors-bin (bench/run builds bench/visitors)

def workloads(quick):
    """Return the list of workload dicts. Quick mode keeps the same shapes with
    ~1 s durations and ~1000-request counts so CI gets a smoke run in ~2 min."""
    W = []
    s_t = "2S" if quick else "5S"
    for c, path in ([(10, "index.html"), (50, "img200.jpg"), (100, "img200.jpg")]
                    if quick else
                    [(10, "index.html"), (200, "img200.jpg"), (500, "img200.jpg")]):
        W.append(dict(tool="siege", path=path, c=c, t=s_t,
                      id=f"siege-c{c}-{path}",
                      label=f"siege -b -t{s_t} -c{c} {path} (conn. close)"))
    for c, n, path in ([(20, 1000, "page17.html"), (20, 200, "img1700.jpg"),
                        (5, 1000, "page50.html"), (50, 1000, "page50.html"),
                        (100, 1000, "page50.html")]
                       if quick else
                       [(20, 100_000, "page17.html"), (20, 10_000, "img1700.jpg"),
                        (5, 10_000, "page50.html"), (50, 10_000, "page50.html"),
                        (100, 10_000, "page50.html")]):
        W.append(dict(tool="ab", path=path, c=c, n=n,
                      id=f"ab-c{c}-n{n}-{path}",
                      label=f"ab -c{c} -n{n} {path}"))
    d = "1s" if quick else "5s"
    for close in (False, True):
        for c in (10, 100, 500):
            W.append(dict(tool="wrk", path="index.html", c=c, d=d, close=close,
                          id=f"wrk-c{c}-{'close' if close else 'ka'}-index.html",
                          label=f"wrk -t2 -c{c} -d{d} index.html "
                                f"({'Connection: close' if close else 'keep-alive'})"))
    # What a PROXY protocol v2 header costs per connection (pika only): the same
    # one-request-per-connection cell through bench/proxy.lua, without the header
    # (the plain listener) and with it (a proxy_protocol listener).
    for pv2 in (False, True):
        W.append(dict(tool="wrk", path="index.html", c=10, d=d, close=True, proxy_v2=pv2,
                      lua=True, id=f"wrk-c10-close-{'pv2' if pv2 else 'lua'}-index.html",
                      label=f"wrk -t2 -c10 -d{d} index.html (Connection: close, "
                            f"{'a PROXY v2 header first' if pv2 else 'no PROXY header'}; "
                            "bench/proxy.lua)"))
    # Browser-like visitors (bench/visitors): index.html, then its ten assets over
    # up to six kept-alive connections, then 1-5 s of thought, again and again.
    # The clients arrive over the ramp, and only requests started after it count.
    ramp, d = (1, 4) if quick else (5, 10)
    for c in ((30, 100, 300) if quick else (300, 1000, 3000)):
        W.append(dict(tool="visitors", path="index.html", assets=ASSETS, c=c, ramp=ramp,
                      d=d, think="1-5", conns=VISITOR_CONNS, timeout=VISITOR_TIMEOUT,
                      id=f"visitors-c{c}",
                      label=f"visitors -c{c}: page + {len(ASSETS)} assets, "
                            f"≤{VISITOR_CONNS} keep-alive conns, think 1-5 s "
                            f"({ramp} s ramp + {d} s)"))
    # HTTPS (issue #20), pika against nginx with the same ECDSA P-256 certificate:
    # keep-alive, a full handshake per request (ab opens a new TLS session every
    # time), wrk's Connection: close (its OpenSSL offers the previous session: a
    # resumed handshake per request), and the 1.7 MB file kept alive.
    d = "1s" if quick else "5s"
    for c in (10, 100):
        W.append(dict(tool="wrk", path="index.html", c=c, d=d, tls=True,
                      id=f"wrk-c{c}-ka-tls-index.html",
                      label=f"HTTPS wrk -t2 -c{c} -d{d} index.html (keep-alive)"))
    n = 1000 if quick else 10_000
    W.append(dict(tool="ab", path="index.html", c=20, n=n, tls=True,
                  id=f"ab-c20-n{n}-tls-index.html",
                  label=f"HTTPS ab -c20 -n{n} index.html (a full handshake per request)"))
    W.append(dict(tool="wrk", path="index.html", c=20, d=d, close=True, tls=True,
                  id="wrk-c20-close-tls-index.html",
                  label=f"HTTPS wrk -t2 -c20 -d{d} index.html (Connection: close, "
                        "resumed handshakes)"))
    W.append(dict(tool="wrk", path="img1700.jpg", c=20, d=d, tls=True,
                  id="wrk-c20-ka-tls-img1700.jpg",
                  label=f"HTTPS wrk -t2 -c20 -d{d} img1700.jpg (keep-alive)"))
    c, n = (100, 1000) if quick else (500, 5000)
    W.append(dict(tool="ab", path="index.html", c=c, n=n, cold=True,
                  id=f"cold-burst-ab-c{c}-n{n}",
                  label=f"cold burst: fresh start, then ab -c{c} -n{n} index.html"))
    return W


# --------------------------------------------------------------------------
# Process bookkeeping: everything we start is listed here and in a pid file
# that bench/run's trap reads if this process itself is killed hard.
# --------------------------------------------------------------------------
LIVE = {}  # pid -> Popen
LIVE_FILE = None


def _starttime(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        return s[s.rfind(b")") + 2:].split()[19].decode()
    except OSError:
        return None


def _write_live():
    if LIVE_FILE:
        tmp = LIVE_FILE + ".tmp"
        with open(tmp, "w") as f:
            for pid in LIVE:
                st = _starttime(pid)
                if st:
                    f.write(f"{pid} {st}\n")
        os.replace(tmp, LIVE_FILE)


def spawn(cmd, **kw):
    # start_new_session: the child leads its own process group (pgid == pid),
    # so a terminal Ctrl-C reaches only us and we stop things in order, and
    # stragglers (forked workers) can be killed by that group id.
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    LIVE[p.pid] = p
    _write_live()
    favour(p.pid)
    return p


# The weight of the bench's sessions against the machine's other ones (see
# favour): a nice value, -20..19; 0 leaves them as they are.
AUTOGROUP_NICE = int(os.environ.get("BENCH_AUTOGROUP_NICE", "-10"))


def favour(pid):
    """Gives the session `pid` leads (a server with its workers, or a load
    tool) the CPU before other people's builds. With the kernel's scheduler
    autogroups (sched_autogroup_enabled, on here), CPU is shared between
    sessions first and only then between the processes of a session, so a
    `nice -n 19` build in another session still takes as much CPU as a whole
    server: measured on this machine, a pika worker in its own session waited
    2.2 ms on the run queue each time it woke (5.6x its run time) while other
    people's niced builds ran. Setting the autogroup's nice (root only)
    restores what `nice` meant: the bench first. Each server and each load
    tool leads its own session, so they stay equals among themselves."""
    if AUTOGROUP_NICE == 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(AUTOGROUP_NICE))
    except OSError:
        pass  # no autogroups in this kernel, or not root: nothing to undo


def _proc_table():
    """pid -> (ppid, utime+stime+cutime+cstime in ticks) for all processes."""
    t = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                s = f.read()
            x = s[s.rfind(b")") + 2:].split()
            t[int(d)] = (int(x[1]), sum(int(v) for v in x[11:15]))
        except (OSError, ValueError, IndexError):
            continue
    return t


def descendants(root, table=None):
    """root and all its descendants, from /proc/*/stat parent links
    (`table`: a `_proc_table()` already read)."""
    kids = {}
    for pid, (ppid, _) in (table or _proc_table()).items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = [], [root]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


def tree_ticks(root):
    """CPU ticks (user + system, with reaped children's) of root's process tree."""
    t = _proc_table()
    return sum(t[p][1] for p in descendants(root, t) if p in t)


def reap(p, grace=10.0):
    """Stop a process we started: SIGTERM to it, then SIGKILL to whatever of
    its tree / process group is still there after `grace` seconds."""
    if p.poll() is None:
        tree = descendants(p.pid)
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    # Workers of a stopped master (same process group) must not outlive it.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    LIVE.pop(p.pid, None)
    _write_live()


# --------------------------------------------------------------------------
# Other work on the machine. Developers' builds, tests and fuzzers may share
# it; their CPU time during a cell is measured so the report can flag (and
# optionally drop) cells that were measured on a busy machine.
# --------------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _ours(table):
    """This harness, its descendants (servers, clients) and its ancestors."""
    me = os.getpid()
    mine = set(descendants(me, table))
    p = me
    while p > 1 and p in table:
        mine.add(p)
        p = table[p][0]
    return mine


def _foreign_ticks(table, mine):
    # Kernel threads (children of kthreadd, pid 2) are left out: softirq
    # work for our own loopback traffic runs there.
    return sum(cpu for pid, (ppid, cpu) in table.items()
               if pid not in mine and pid != 2 and ppid != 2)


class ForeignCPU:
    """CPU seconds used by processes that are not part of this benchmark,
    between start() and stop(). A process of theirs that ends in between is
    still counted through its parent's cutime/cstime."""

    def start(self):
        t = _proc_table()
        self.t0, self.mine0 = time.monotonic(), _ours(t)
        self.pids0 = set(t)
        self.c0 = _foreign_ticks(t, self.mine0)
        return self

    def stop(self):
        t = _proc_table()
        mine = _ours(t) | self.mine0
        c1 = _foreign_ticks(t, mine)
        wall = time.monotonic() - self.t0
        sec = max(0.0, (c1 - self.c0) / CLK_TCK)
        return {"foreign_cpu_s": round(sec, 2),
                "foreign_cpu_pct": round(100 * sec / (wall * NPROC), 1) if wall > 0 else None}


def _forget(p):
    """A process we started has ended (or was killed): drop it from the lists."""
    LIVE.pop(p.pid, None)
    _write_live()


def cleanup_all():
    for pid, p in list(LIVE.items()):
        reap(p, grace=3.0)


# --------------------------------------------------------------------------
# Memory sampling: PSS summed over the server master and all descendants.
# --------------------------------------------------------------------------
def worker_private(root):
    """The largest private memory (Private_Clean + Private_Dirty, kB: the pages
    no other process shares) of one process under `root` other than `root`
    itself: a worker's own pages, or None when `root` has no child."""
    best = None
    for pid in descendants(root):
        if pid == root:
            continue
        kb = 0
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        kb += int(line.split()[1])
        except OSError:
            continue
        best = kb if best is None else max(best, kb)
    return best


def pss_tree(root):
    total, n = 0, 0
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        n += 1
                        break
        except OSError:
            pass  # a short-lived child (busybox forks per connection) left
    return total, n


def accept_queue(port):
    """Connections the kernel has completed but the server has not accept()ed
    yet: the accept queue of its listening sockets on `port`, summed (what `ss`
    shows as Recv-Q; /proc/net/tcp has it as rx_queue of a socket in state 0A,
    LISTEN). It matters because wrk never counts a request that gets no answer
    at all (it only counts late answers as timeouts), so clients starved in the
    backlog would otherwise be invisible. Read from /proc, not by running `ss`,
    so that sampling starts no process (the client's CPU is measured as this
    harness's children's, see run_client).

    Only /proc/net/tcp (every server listens on 127.0.0.1), and only up to the
    first socket that is not listening: the kernel lists the listening ones
    first. Reading all of it walks every socket on the machine: measured 40 ms
    of CPU a sample with 16,000 TIME_WAITs of other people's tests, and a
    visitors cell adds 36,000 sockets of its own; /proc/net/tcp6, even empty,
    walks them all too."""
    total, seen = 0, False
    try:
        with open("/proc/net/tcp") as f:
            next(f)  # header
            for line in f:
                x = line.split()
                if x[3] != "0A":
                    break
                if int(x[1].rsplit(":", 1)[1], 16) == port:
                    total += int(x[4].split(":")[1], 16)
                    seen = True
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    return total if seen else None


# How often a running cell samples the server's memory and accept queue. A
# sample is not free: smaps_rollup walks every page table of every process
# (~25 ms of CPU for 50 workers under load) and `ss` (used then) was a
# fork and exec, so at 0.2 s it took a share of the 2 cores that grew with
# the server's process count, and measured: pika, wrk -c10 Connection: close after the keep-alive
# cells (52 processes), p99 0.58 ms unsampled, 1.98/2.60 ms sampled every
# 0.2 s, 1.30/0.96 ms every 1 s. The peaks it looks for last for the whole
# cell (a pool grown to its size, clients starved in the backlog).
SAMPLE_EVERY = 1.0


class MemSampler(threading.Thread):
    """Samples, until finish(): PSS of the server's process tree (max kept)
    and, with a port, its accept-queue depth (max kept)."""

    def __init__(self, root, interval=SAMPLE_EVERY, port=None):
        super().__init__(daemon=True)
        self.root, self.interval, self.port = root, interval, port
        self.peak_kb, self.peak_procs, self.samples = 0, 0, 0
        self.max_procs = 0
        self.peak_worker_private = None
        self.peak_queue = None
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            kb, n = pss_tree(self.root)
            self.samples += 1
            if kb > self.peak_kb:
                self.peak_kb, self.peak_procs = kb, n
            self.max_procs = max(self.max_procs, n)
            w = worker_private(self.root)
            if w is not None and (self.peak_worker_private is None or w > self.peak_worker_private):
                self.peak_worker_private = w
            if self.port:
                q = accept_queue(self.port)
                if q is not None and (self.peak_queue is None or q > self.peak_queue):
                    self.peak_queue = q
            self._halt.wait(self.interval)

    def finish(self):
        self._halt.set()
        self.join(timeout=5)
        return {"peak_pss_kb": self.peak_kb, "peak_procs": self.peak_procs,
                "max_procs": self.max_procs, "peak_worker_private_kb": self.peak_worker_private,
                "peak_accept_queue": self.peak_queue, "samples": self.samples}


# --------------------------------------------------------------------------
# Server definitions: each renders its own config into its instance dir.
# --------------------------------------------------------------------------
class Server:
    name = "?"
    access_log = True
    # user that must own the instance dir (server opens its logs after
    # dropping privileges), or None
    owner = None

    # Whether it serves the HTTPS cells (on tls_port, with CERT and KEY).
    tls = False

    def __init__(self, port, docroot, tmp, tls_port=None):
        self.port, self.docroot, self.tmp, self.tls_port = port, docroot, tmp, tls_port

    def config(self, d):  # -> (filename, text) or None
        return None

    def command(self, d, conf):
        """Command line of one instance. A server whose workers_for() returns
        a number also takes `workers=N` here."""
        raise NotImplementedError

    def workers_for(self, wl):
        """Worker processes this server wants for workload `wl` (wl None: the
        instance started for idle memory and the content check), or None: no
        per-cell sizing, every instance runs as configured. When it differs
        from the running instance's count, the main loop starts a fresh
        instance with that many workers (see Instance, main)."""
        return None

    def available(self):
        return None  # or a reason string why it cannot run

    def spawn_kw(self, d):
        """Extra subprocess.Popen arguments for an instance in folder `d`."""
        return {}

    def not_for(self, wl):
        """Why this server sits workload `wl` out (a reason string), or None."""
        if wl.get("lua"):
            return "the PROXY protocol cells measure pika's header cost only"
        return self.no_tls(wl)

    def no_tls(self, wl):
        if wl.get("tls") and not self.tls:
            return ("not set up for HTTPS here (the HTTPS cells compare pika with the event-driven "
                    "servers users put TLS on: nginx, h2o, Caddy)")
        return None

    def config_for_report(self):
        """The rendered config with run-specific paths replaced by names."""
        c = self.config(os.path.join(self.tmp, "INSTANCE"))
        if not c:
            return None
        return c[1].replace(self.docroot, "DOCROOT").replace(self.tmp, "TMPDIR")


class Nginx(Server):
    name = "nginx"
    tls = True
    # the access_log directive's parameters after the format
    log_params = ""

    def config(self, d):
        return "nginx.conf", f"""\
# generated by bench/harness.py
daemon off;
master_process on;
user www-data;
worker_processes {NPROC};          # = number of cores
pid {d}/nginx.pid;
error_log {d}/error.log;
# the hard RLIMIT_NOFILE of the machine: each worker may raise itself to it
worker_rlimit_nofile {NOFILE};
events {{
    # nginx's compiled default is 512. The visitors cells hold up to 18,000
    # connections, and connections do not spread evenly over the workers, so
    # each worker gets room for all of them; the rest of worker_rlimit_nofile
    # is for the files being sent and the logs.
    worker_connections {max(1024, NOFILE - 1000)};
}}
http {{
    include /etc/nginx/mime.types;     # read-only
    default_type application/octet-stream;
    sendfile on;
    access_log {d}/access.log combined{self.log_params};
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen {HOST}:{self.port};
        server_name localhost;
        root {self.docroot};
    }}
    # HTTPS: the same ECDSA P-256 certificate as pika's, TLS 1.2 and 1.3 as pika
    # offers; nginx's defaults otherwise (session tickets on, with keys its
    # master makes at start, shared by its workers).
    server {{
        listen {HOST}:{self.tls_port} ssl;
        server_name localhost;
        root {self.docroot};
        ssl_certificate {CERT};
        ssl_certificate_key {KEY};
        ssl_protocols TLSv1.2 TLSv1.3;
    }}
}}
"""

    def command(self, d, conf):
        return ["nginx", "-p", d + "/", "-e", f"{d}/error.log", "-c", conf]

    def available(self):
        return None if shutil.which("nginx") else "nginx not installed"


class NginxBuffered(Nginx):
    """nginx as production sites log: a worker collects access-log records in
    32 KB and writes them when it is full or a second has passed."""
    name = "nginx-buffered"
    log_params = " buffer=32k flush=1s"


class Apache(Server):
    name = "apache"
    MODS = "/usr/lib/apache2/modules"
    # extra lines after CustomLog
    log_extra = ""

    def config(self, d):
        return "apache2.conf", f"""\
# generated by bench/harness.py -- prefork MPM with its compiled-in defaults
# (StartServers 5, Min/MaxSpareServers 5/10, MaxRequestWorkers 256,
#  KeepAlive On, KeepAliveTimeout 5, EnableSendfile Off)
ServerRoot "{d}"
ServerName localhost
Listen {HOST}:{self.port}
PidFile {d}/apache2.pid
DefaultRuntimeDir {d}
Mutex file:{d} default
LoadModule mpm_prefork_module {self.MODS}/mod_mpm_prefork.so
LoadModule authz_core_module {self.MODS}/mod_authz_core.so
LoadModule mime_module {self.MODS}/mod_mime.so
LoadModule dir_module {self.MODS}/mod_dir.so
User www-data
Group www-data
TypesConfig /etc/mime.types
DocumentRoot "{self.docroot}"
<Directory "{self.docroot}">
    Require all granted
</Directory>
DirectoryIndex index.html
ErrorLog {d}/error.log
LogLevel warn
LogFormat "%h %l %u %t \\"%r\\" %>s %b" common
CustomLog {d}/access.log common
{self.log_extra}"""

    def command(self, d, conf):
        return ["apache2", "-f", conf, "-DFOREGROUND"]

    def available(self):
        if not shutil.which("apache2"):
            return "apache2 not installed"
        if not os.path.exists(f"{self.MODS}/mod_mpm_prefork.so"):
            return "mod_mpm_prefork.so missing"
        return None


class ApacheBuffered(Apache):
    """Apache as production sites log: each worker collects access-log records
    in a buffer of PIPE_BUF (4 KB) and writes it when the next record does not
    fit or the worker exits (mod_log_config's BufferedLogs; no timer)."""
    name = "apache-buffered"
    log_extra = "BufferedLogs On\n"


class Lighttpd(Server):
    name = "lighttpd"
    owner = "www-data"  # lighttpd opens its error log after setuid()

    def config(self, d):
        return "lighttpd.conf", f"""\
# generated by bench/harness.py -- lighttpd defaults plus mod_accesslog
server.document-root = "{self.docroot}"
server.bind = "{HOST}"
server.port = {self.port}
server.username = "www-data"
server.groupname = "www-data"
server.errorlog = "{d}/error.log"
server.pid-file = "{d}/lighttpd.pid"
server.modules = ( "mod_accesslog" )
accesslog.filename = "{d}/access.log"
# The visitors cells hold up to 18,000 connections. lighttpd allows at most
# max-fds / 2 connections (a file being sent takes a descriptor too), and
# max-fds cannot pass the machine's hard RLIMIT_NOFILE: so {NOFILE // 2}.
server.max-fds = {NOFILE}
server.max-connections = {NOFILE // 2}
index-file.names = ( "index.html" )
# Static list instead of Debian's include_shell of a perl script, so no
# helper process runs at start-up (it would show in the cold-burst memory).
mimetype.assign = ( ".html" => "text/html", ".jpg" => "image/jpeg",
                    ".css" => "text/css", ".js" => "text/javascript",
                    ".png" => "image/png", ".txt" => "text/plain",
                    ".svg" => "image/svg+xml", ".woff2" => "font/woff2" )
"""

    def command(self, d, conf):
        return ["lighttpd", "-D", "-f", conf]

    def available(self):
        return None if shutil.which("lighttpd") else "lighttpd not installed"


class Busybox(Server):
    name = "busybox"
    access_log = False  # busybox httpd has no access log

    def not_for(self, wl):
        if wl.get("lua") or self.no_tls(wl):
            return super().not_for(wl)
        if wl["tool"] == "visitors":
            return ("busybox httpd does no keep-alive (a process per connection, "
                    "closed after one answer): nothing of what these cells measure")
        return None

    def config(self, d):
        return None

    def command(self, d, conf):
        return ["busybox", "httpd", "-f", "-p", f"{HOST}:{self.port}",
                "-h", self.docroot]

    def available(self):
        if not shutil.which("busybox"):
            return "busybox not installed"
        r = subprocess.run(["busybox", "--list"], capture_output=True, text=True)
        return None if "httpd" in r.stdout.split() else "busybox built without httpd"


class H2o(Server):
    """h2o (Debian's 2.2.5): one process, one event-loop thread per core."""
    name = "h2o"
    tls = True
    owner = "www-data"  # h2o writes its pid file after dropping to www-data

    def config(self, d):
        return "h2o.conf", f"""\
# generated by bench/harness.py -- h2o defaults plus an access log
num-threads: {NPROC}              # = number of cores (event-loop threads)
user: www-data
pid-file: {d}/h2o.pid
error-log: {d}/error.log
# the visitors cells hold up to 18,000 connections (h2o's default is 1,024)
max-connections: {max(1024, NOFILE - 1000)}
# h2o's default format is Apache's combined, written as each request ends
access-log: {d}/access.log
file.mime.addtypes:
  font/woff2: .woff2
listen:
  host: {HOST}
  port: {self.port}
# HTTPS: the same ECDSA P-256 certificate as pika's and nginx's, TLS 1.2 and 1.3;
# h2o's defaults otherwise (session cache and tickets on)
listen:
  host: {HOST}
  port: {self.tls_port}
  ssl:
    certificate-file: {CERT}
    key-file: {KEY}
    minimum-version: TLSv1.2
hosts:
  "localhost":
    paths:
      /:
        file.dir: {self.docroot}
"""

    def command(self, d, conf):
        return ["h2o", "-c", conf]

    def available(self):
        return None if shutil.which("h2o") else "h2o not installed"


class Caddy(Server):
    """Caddy (Debian's 2.6.2): one Go process, GOMAXPROCS = cores."""
    name = "caddy"
    tls = True
    # Caddy cannot drop privileges itself: it runs as www-data from the start
    # (spawn_kw), so its instance folder (logs, its data dir) must be www-data's
    owner = "www-data"

    def config(self, d):
        return "Caddyfile", f"""\
# generated by bench/harness.py -- Caddy defaults plus an access log
{{
    admin off
    auto_https off
    # certificates a client asks for by IP address (no SNI) get the site's
    default_sni localhost
    storage file_system {d}/data
    log {{
        output file {d}/error.log
    }}
}}
http://:{self.port} {{
    bind {HOST}
    root * {self.docroot}
    file_server
    # Caddy writes JSON records (its only encoders are json and console);
    # each record is written as its request ends
    log {{
        output file {d}/access.log
    }}
}}
# HTTPS: the same ECDSA P-256 certificate, TLS 1.2 and 1.3 (Caddy's defaults);
# the key is a copy readable by www-data (Caddy runs as www-data)
https://:{self.tls_port} {{
    bind {HOST}
    tls {d}/cert.pem {d}/key.pem
    root * {self.docroot}
    file_server
    log {{
        output file {d}/access.log
    }}
}}
"""

    def command(self, d, conf):
        return ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]

    def spawn_kw(self, d):
        if os.geteuid() == 0:
            pw = pwd.getpwnam("www-data")
            for src, name in ((CERT, "cert.pem"), (KEY, "key.pem")):
                dst = os.path.join(d, name)
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o600)
                os.chown(dst, pw.pw_uid, pw.pw_gid)
            kw = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
        else:
            for src, name in ((CERT, "cert.pem"), (KEY, "key.pem")):
                shutil.copyfile(src, os.path.join(d, name))
            kw = {}
        env = dict(os.environ, HOME=d, XDG_DATA_HOME=f"{d}/data", XDG_CONFIG_HOME=f"{d}/config",
                   GOMAXPROCS=str(NPROC))
        return dict(kw, env=env)

    def available(self):
        return None if shutil.which("caddy") else "caddy not installed"


class Pika(Server):
    name = "pika"
    tls = True
    # The instance folder stays root's: pika refuses, as root, to write its pid
    # file and logs in a folder another user may write (a planted link there
    # would make it write or chown a file of that user's choosing). The master
    # creates the logs for its workers (as www-data) itself.
    owner = None

    def not_for(self, wl):
        return None  # pika runs every cell, the PROXY protocol ones too

    def mime_types(self):
        # pika's own shipped table (its default is conf/mime.types under root)
        own = os.path.join(REPO_DIR, "conf", "mime.types")
        return own if os.path.exists(own) else "/etc/mime.types"

    def config(self, d):
        return "pika.toml", f"""\
# generated by bench/harness.py
[server]
# the third listener expects a PROXY protocol header (the wrk-c10-close-pv2 cell)
listen = ["{HOST}:{self.port}", {{ addr = "{HOST}:{self.tls_port}", tls = true }},
          {{ addr = "{HOST}:{self.port + PROXY_PORT_OFFSET}", proxy_protocol = true }}]
root = "{d}"            # base for relative paths
pid_file = "{d}/pika.pid"
error_log = "{d}/error.log"
mime_types = "{self.mime_types()}"
# like nginx, apache and lighttpd here: workers serve as www-data
user = "www-data"
# as an operator expecting many kept-alive clients would: the visitors cells hold
# up to 18,000 connections (this is the machine's hard limit)
max_open_files = {NOFILE}

[workers]
# defaults: left unset so the default configuration is what is measured

[[vhost]]
server_names = ["localhost", "127.0.0.1"]
root = "{self.docroot}"
tls_cert = "{CERT}"
tls_key = "{KEY}"

[[access_log]]
path = "{d}/access.log"
format = "combined"
"""

    def command(self, d, conf):
        return [PIKA_BIN, "-F", "-f", conf]

    def available(self):
        if not (os.path.isfile(PIKA_BIN) and os.access(PIKA_BIN, os.X_OK)):
            return "pika binary not found, build with cargo build --release"
        return None


class Floor(Server):
    """The least a prefork server can do (bench/floor.c), sized per cell:
    - one request per connection (siege, ab, wrk with Connection: close, the
      cold burst): a pool of 2 x nproc workers, its best there;
    - keep-alive (wrk without Connection: close): one worker per connection,
      max(2 x nproc, c). A blocking worker holds its keep-alive connection
      for the whole run, so 2 x nproc workers would serve only 2 x nproc of
      the c clients and leave the rest unanswered in the accept queue (wrk
      does not count those as errors): a figure for 2 x nproc clients, not
      for c, and one that starves clients. One process per connection is
      the floor for keep-alive, with a wake-up per request as its price."""
    name = "floor"
    access_log = False
    bin = None  # set from --floor-bin
    POOL = 2 * NPROC
    MAX_WORKERS = 1024  # floor.c's cap

    def not_for(self, wl):
        if wl.get("lua") or self.no_tls(wl):
            return super().not_for(wl)
        if wl["tool"] == "visitors":
            return (f"the floor holds a kept-alive connection per process: "
                    f"{wl['c']} visitors would want {wl['c'] * wl['conns']} processes "
                    f"(floor.c stops at {self.MAX_WORKERS}), and any fewer leave "
                    "connections unanswered in the accept queue")
        return None

    def workers_for(self, wl):
        if wl is not None and wl["tool"] == "wrk" and not wl.get("close"):
            return min(self.MAX_WORKERS, max(self.POOL, wl["c"]))
        return self.POOL

    def command(self, d, conf, workers=None):
        return [self.bin, str(self.port), str(workers or self.POOL)]

    def available(self):
        if not (self.bin and os.access(self.bin, os.X_OK)):
            return "floor binary missing (bench/run compiles bench/floor.c with gcc)"
        return None

    def config_for_report(self):
        ka = ", ".join(f"-c{c} -> {max(self.POOL, c)}" for c in (10, 100, 500))
        return "\n".join([
            "bench/floor.c, listen backlog 511; worker count set per cell (2nd argument):",
            "- one request per connection (siege, ab, wrk with Connection: close,",
            f"  cold burst): {self.POOL} workers (2 x nproc)",
            "- keep-alive (wrk without Connection: close): one worker per connection,",
            f"  max({self.POOL}, c): {ka}",
            f"  ({self.POOL} workers would serve {self.POOL} connections for the whole run",
            "  while the others wait unanswered in the accept queue)"])


CLASSES = {"nginx": Nginx, "nginx-buffered": NginxBuffered, "apache": Apache,
           "apache-buffered": ApacheBuffered, "lighttpd": Lighttpd,
           "h2o": H2o, "caddy": Caddy, "busybox": Busybox, "pika": Pika, "floor": Floor}


def make_cert(tmp):
    """A self-signed ECDSA P-256 certificate for localhost (the HTTPS cells'), and
    its key, readable by root alone: both servers' masters read it before their
    workers drop privileges."""
    d = os.path.join(tmp, "tls")
    os.makedirs(d, mode=0o700, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "30", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    os.chmod(key, 0o600)
    return cert, key


def port_free(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def port_accepts(port):
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


class Instance:
    """One running server process tree, from a fresh instance directory.
    `workers`: worker count from srv.workers_for() (None: as configured)."""

    def __init__(self, srv, tag, workers=None):
        self.srv, self.workers = srv, workers
        self.dir = os.path.join(srv.tmp, "run", f"{srv.name}-{tag}")
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        c = srv.config(self.dir)
        self.conf = None
        if c:
            self.conf = os.path.join(self.dir, c[0])
            with open(self.conf, "w") as f:
                f.write(c[1])
        if srv.owner and os.geteuid() == 0:
            pw = pwd.getpwnam(srv.owner)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.out = open(os.path.join(self.dir, "stdout-stderr.log"), "wb")
        self.proc = None

    def start(self, wait=15.0, poll=0.01):
        """Spawn and wait until the port accepts. Returns seconds to ready."""
        for _ in range(100):  # a previous instance may still be releasing it
            if port_free(self.srv.port):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"port {self.srv.port} is busy (not ours to kill)")
        t0 = time.monotonic()
        cmd = (self.srv.command(self.dir, self.conf) if self.workers is None else
               self.srv.command(self.dir, self.conf, workers=self.workers))
        self.proc = spawn(cmd, cwd=self.dir, **self.srv.spawn_kw(self.dir),
                          stdin=subprocess.DEVNULL, stdout=self.out,
                          stderr=subprocess.STDOUT)
        while time.monotonic() - t0 < wait:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.srv.name} exited with {self.proc.returncode}: "
                                   + self.tail())
            if port_accepts(self.srv.port):
                return time.monotonic() - t0
            time.sleep(poll)
        raise RuntimeError(f"{self.srv.name} did not accept on port "
                           f"{self.srv.port} within {wait}s: " + self.tail())

    def tail(self, n=1500):
        out = ""
        for name in ("stdout-stderr.log", "error.log"):
            p = os.path.join(self.dir, name)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    out += f"[{name}] " + f.read()[-n:].decode(errors="replace")
        return out.strip()

    def access_lines(self):
        p = os.path.join(self.dir, "access.log")
        if not os.path.exists(p):
            return None
        with open(p, "rb") as f:
            return sum(1 for _ in f)

    def stop(self):
        if self.proc:
            reap(self.proc)
        self.out.close()

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def tls_session(port, again=5):
    """The protocol and cipher an OpenSSL client (Python's ssl; wrk and ab use
    OpenSSL too) gets on `port`, and whether its reconnections with the session
    it had resumed it: wrk's Connection: close cell reconnects so, ab never
    offers a session. Each connection GETs index.html and reads the answer to
    the end (TLS 1.3 sends its tickets after the handshake). {"protocol",
    "cipher", "resumed": "n of m reconnections"} or {"error"}."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    out, session, reused = {}, None, 0
    try:
        for i in range(1 + again):
            with socket.create_connection((HOST, port), timeout=5) as raw, \
                    ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
                s.sendall(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n"
                          b"Connection: close\r\n\r\n")
                while s.recv(65536):
                    pass
                if i == 0:
                    out = {"protocol": s.version(), "cipher": s.cipher()[0]}
                else:
                    reused += s.session_reused
                session = s.session
    except (OSError, ssl.SSLError) as e:
        return {"error": str(e)}
    out["resumed"] = f"{reused} of {again} reconnections"
    return out


def verify(srv, files):
    """GET every docroot file the way the load tools do (Host: 127.0.0.1:PORT)
    and compare bytes. Returns {file: "ok" | problem}."""
    res = {}
    for name, meta in files.items():
        try:
            c = http.client.HTTPConnection(HOST, srv.port, timeout=5)
            c.request("GET", "/" + name)
            r = c.getresponse()
            body = r.read()
            ctype = r.getheader("Content-Type") or ""
            c.close()
            want = TYPES.get(meta.get("kind"), "")
            if r.status != 200:
                res[name] = f"HTTP {r.status}"
            elif srv.name == "floor":
                res[name] = "ok (floor: fixed 1400-byte body)" if len(body) == 1400 \
                    else f"floor body {len(body)} bytes"
            elif hashlib.sha256(body).hexdigest() != meta["sha256"]:
                res[name] = f"content mismatch ({len(body)} bytes)"
            elif not ctype.startswith(want):
                res[name] = f"Content-Type {ctype or 'none'} (expected {want})"
            else:
                res[name] = "ok"
        except Exception as e:  # noqa: BLE001 - report any failure as text
            res[name] = f"error: {e}"
    return res


# --------------------------------------------------------------------------
# Load tools: command lines and output parsers.
# All parsers return a dict with the same keys (None = the tool does not say).
# --------------------------------------------------------------------------
def siegerc(path):
    with open(path, "w") as f:
        f.write("""\
# generated by bench/harness.py, used via `siege -R THIS_FILE`
verbose = false
color = off
quiet = false
csv = false
timestamp = false
fullurl = false
display-id = false
show-logfile = false
logging = false
protocol = HTTP/1.1
connection = close
# siege refuses more than `limit` users; the default is 255
limit = 1024
# keep going on errors: count them instead of aborting the run
failures = 1000000
timeout = 10
# do not fetch resources referenced by HTML pages
parser = false
cache = false
""")


def client_cmd(wl, port, rc):
    url = f"http://{HOST}:{port}/{wl['path']}"
    if wl.get("tls"):
        url = f"https://{HOST}:{port + TLS_PORT_OFFSET}/{wl['path']}"
    if wl["tool"] == "visitors":
        # one thread: the client's share of the 2 cores stays bounded (its CPU
        # is reported beside the latencies)
        return [VISITORS_BIN or "visitors", "--addr", f"{HOST}:{port}",
                "--host", f"{HOST}:{port}", "--clients", str(wl["c"]),
                "--duration", str(wl["d"]), "--ramp", str(wl["ramp"]),
                "--think", wl["think"], "--conns", str(wl["conns"]),
                "--timeout", str(wl["timeout"]), "--threads", "1",
                "--page", "/" + wl["path"], "--assets", ",".join("/" + a for a in wl["assets"])]
    if wl["tool"] == "siege":
        return ["siege", "-R", rc, "-b", f"-t{wl['t']}", f"-c{wl['c']}", url]
    if wl["tool"] == "ab":
        # -r: keep going on socket receive errors (count them, do not abort)
        # -s 10: per-request timeout, so one stuck socket cannot stall ab 30 s
        return ["ab", "-r", "-s", "10", "-c", str(wl["c"]), "-n", str(wl["n"]), url]
    cmd = ["wrk", "-t2", f"-c{wl['c']}", f"-d{wl['d']}", "--timeout", "2s", "--latency"]
    if wl.get("lua"):
        # bench/proxy.lua sends Connection: close itself (and the PROXY header);
        # the header cell goes to pika's proxy_protocol listener
        if wl.get("proxy_v2"):
            url = f"http://{HOST}:{port + PROXY_PORT_OFFSET}/{wl['path']}"
        return cmd + ["-s", os.path.join(REPO_DIR, "bench", "proxy.lua"), url]
    if wl.get("close"):
        cmd += ["-H", "Connection: close"]
    return cmd + [url]


def wall_limit(wl):
    """Hard wall-clock limit for one client run (seconds)."""
    if wl["tool"] == "siege":
        # a siege that is not done 15 s after its -t is hung, see run_client
        return int(wl["t"].rstrip("S")) + 15
    if wl["tool"] == "wrk":
        return int(wl["d"].rstrip("s")) + 30
    if wl["tool"] == "visitors":
        # no request starts after ramp + d, none outlasts the timeout
        return wl["ramp"] + wl["d"] + wl["timeout"] + 30
    return max(30, min(300, wl["n"] // 200))  # ab: >= 200 req/s or it is cut


def _num(rx, text, conv=float):
    m = re.search(rx, text, re.M)
    return conv(m.group(1)) if m else None


def _empty():
    return dict(requests=None, rps=None, mbps=None, failed=None, p50_ms=None,
                p90_ms=None, p99_ms=None, avg_ms=None, max_ms=None, duration_s=None,
                bytes=None, retries=None, detail={})


def parse_ab(text, n_asked):
    r = _empty()
    done = _num(r"^Complete requests:\s+(\d+)", text, int)
    if done is None:
        # ab gave up (e.g. "apr_pollset_poll: The timeout specified has expired")
        partial = _num(r"Total of (\d+) requests completed", text, int)
        r["detail"]["aborted"] = True
        r["requests"] = partial or 0
        r["failed"] = n_asked - (partial or 0)
        return r
    failed = _num(r"^Failed requests:\s+(\d+)", text, int) or 0
    non2xx = _num(r"^Non-2xx responses:\s+(\d+)", text, int) or 0
    r["requests"] = done
    r["duration_s"] = _num(r"^Time taken for tests:\s+([\d.]+)", text)
    r["rps"] = _num(r"^Requests per second:\s+([\d.]+)", text)
    r["bytes"] = _num(r"^Total transferred:\s+(\d+)", text, int)
    if r["bytes"] is not None and r["duration_s"]:
        r["mbps"] = r["bytes"] / r["duration_s"] / 1e6
    # requests asked but never completed (ab interrupted) count as failed too
    r["failed"] = failed + non2xx + max(0, n_asked - done)
    r["detail"] = {"ab_failed": failed, "non2xx": non2xx}
    m = re.search(r"^\s+\(Connect: (\d+), Receive: (\d+), Length: (\d+), "
                  r"Exceptions: (\d+)\)", text, re.M)
    if m:
        r["detail"].update(zip(("connect", "receive", "length", "exceptions"),
                               map(int, m.groups())))
    r["p50_ms"] = _num(r"^\s+50%\s+(\d+)", text)
    r["p99_ms"] = _num(r"^\s+99%\s+(\d+)", text)
    r["max_ms"] = _num(r"^\s+100%\s+(\d+)", text)
    r["avg_ms"] = _num(r"^Time per request:\s+([\d.]+) \[ms\] \(mean\)$", text)
    return r


_UNIT_T = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_UNIT_B = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


def _wrk_time(s):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", s)
    return float(m.group(1)) * _UNIT_T[m.group(2)] if m else None


def parse_wrk(text):
    r = _empty()
    m = re.search(r"^\s+(\d+) requests in ([\d.]+)(ms|s|m), ([\d.]+)(B|KB|MB|GB|TB) read",
                  text, re.M)
    if not m:
        return r
    r["requests"] = int(m.group(1))
    r["duration_s"] = float(m.group(2)) * {"ms": 1e-3, "s": 1, "m": 60}[m.group(3)]
    r["bytes"] = int(float(m.group(4)) * _UNIT_B[m.group(5)])
    r["rps"] = _num(r"^Requests/sec:\s+([\d.]+)", text)
    if r["duration_s"]:
        r["mbps"] = r["bytes"] / r["duration_s"] / 1e6
    se = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errs = dict(zip(("connect", "read", "write", "timeout"), map(int, se.groups()))) \
        if se else {}
    non = _num(r"Non-2xx or 3xx responses: (\d+)", text, int) or 0
    r["failed"] = sum(errs.values()) + non
    r["detail"] = dict(errs, non2xx_3xx=non)
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        mm = re.search(rf"^\s+{pct}%\s+(\S+)", text, re.M)
        if mm:
            r[key] = _wrk_time(mm.group(1))
    mm = re.search(r"^\s+Latency\s+(\S+)\s+\S+\s+(\S+)", text, re.M)
    if mm:
        r["avg_ms"], r["max_ms"] = _wrk_time(mm.group(1)), _wrk_time(mm.group(2))
    return r


def parse_visitors(text, wl):
    """bench/visitors prints one JSON object on stdout (its summary line goes
    to stderr, merged here)."""
    r = _empty()
    line = next((x for x in reversed(text.splitlines()) if x.startswith("{")), None)
    try:
        v = json.loads(line) if line else None
    except ValueError:
        v = None
    if not v:
        return r
    r["requests"], r["rps"], r["failed"] = v["requests"], v["rps"], v["failures"]
    r["retries"] = v["retries"]
    for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"):
        r[k] = v[k] if v["requests"] > v["failures"] else None
    r["duration_s"], r["bytes"] = wl["d"], v["bytes"]
    r["mbps"] = v["bytes"] / wl["d"] / 1e6
    r["detail"] = {k: v.get(k) for k in ("connects", "slow_connects", "closed_idle",
                                         "told_close", "client_cpu_s", "client_cpu_wait_s",
                                         "client_lag_p99_ms", "client_lag_max_ms",
                                         "wall_s", "first_error")}
    return r


def parse_siege(text):
    r = _empty()
    tx = _num(r"^Transactions:\s+(\d+)", text, int)
    if tx is None:
        return r
    ok = _num(r"^Successful transactions:\s+(\d+)", text, int) or 0
    bad = _num(r"^Failed transactions:\s+(\d+)", text, int) or 0
    r["requests"] = tx
    r["duration_s"] = _num(r"^Elapsed time:\s+([\d.]+)", text)
    r["rps"] = _num(r"^Transaction rate:\s+([\d.]+)", text)
    mb = _num(r"^Data transferred:\s+([\d.]+)", text)  # siege: MiB, bodies only
    if mb is not None:
        r["bytes"] = int(mb * 1024 ** 2)
        if r["duration_s"]:
            r["mbps"] = r["bytes"] / r["duration_s"] / 1e6
    # siege's own failures are socket errors/timeouts; responses >= 400 are
    # transactions that are not "successful": count both.
    r["failed"] = bad + max(0, tx - ok)
    conc = _num(r"^Concurrency:\s+([\d.]+)", text)
    # siege prints response time with 10 ms resolution; Little's law gives the
    # mean more precisely: mean latency = mean concurrency / throughput.
    if conc is not None and r["rps"]:
        r["avg_ms"] = conc / r["rps"] * 1000
    longest = _num(r"^Longest transaction:\s+([\d.]+)", text)
    r["max_ms"] = longest * 1000 if longest is not None else None
    r["detail"] = {"failed_transactions": bad, "unsuccessful": max(0, tx - ok),
                   "concurrency": conc}
    return r


# A cell during which other processes used more than BUSY_PCT % of the CPU
# is measured again, up to BUSY_TRIES attempts in all (see main loop).
BUSY_PCT = 25.0
BUSY_TRIES = 2
SIEGE_SHIM = None  # LD_PRELOAD library, see bench/siege-nocancel.c
SIEGE_TRIES = 3


def listen_overflows():
    """The kernel's count of connections dropped because a listen queue was
    full (TcpExt ListenOverflows), machine-wide: a client's SYN dropped then is
    sent again after 1 s. None if unreadable."""
    try:
        with open("/proc/net/netstat") as f:
            lines = [x.split() for x in f if x.startswith("TcpExt:")]
        return int(dict(zip(lines[0], lines[1]))["ListenOverflows"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def run_client(wl, port, rc, root_pid, sampler=None):
    """Run one load-tool invocation, sampling the server's memory meanwhile.
    `sampler` may be one already running (cold burst: started at ready)."""
    cmd = client_cmd(wl, port, rc)
    if wl["tool"] == "visitors":
        # the client's sockets must fit its descriptor limit, or its own EMFILE
        # would look like the server's failures
        need = wl["c"] * wl["conns"] + 64
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        why = (None if VISITORS_BIN and os.access(VISITORS_BIN, os.X_OK) else
               "bench/visitors not built (bench/run builds it with cargo)")
        if why is None and soft != resource.RLIM_INFINITY and soft < need:
            why = f"RLIMIT_NOFILE {soft} < the {need} descriptors {wl['c']} visitors need"
        if why:
            return dict(cmd=cmd, exit=None, wall_s=0, metrics=_empty(), mem={}, error=why)
    if sampler is None:
        sampler = MemSampler(root_pid, port=port + TLS_PORT_OFFSET if wl.get("tls") else port)
        sampler.start()
    env = None
    if wl["tool"] == "siege" and SIEGE_SHIM:
        env = dict(os.environ, LD_PRELOAD=SIEGE_SHIM)
    if wl.get("proxy_v2"):
        env = dict(os.environ, PROXY_V2="1")  # bench/proxy.lua sends the header
    limit = wall_limit(wl)
    tries = SIEGE_TRIES if wl["tool"] == "siege" else 1
    # The machine may be shared (builds, tests): keep the load average so the
    # report can flag cells measured on a busy machine.
    load_before = os.getloadavg()[0]
    foreign = ForeignCPU().start()
    # CPU of the server (its process tree, ended workers through their
    # parent's cutime) and of the load tool (this harness's only child
    # process that ends meanwhile), to tell which side a cell is bound by.
    srv_ticks0 = tree_ticks(root_pid)
    overflows0 = listen_overflows()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    hangs = 0
    for attempt in range(1, tries + 1):
        p = spawn(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT, env=env)
        cut = False
        try:
            out, _ = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            cut = True
            if wl["tool"] == "siege":
                # siege hung in its end-of-run thread teardown (see
                # siege-nocancel.c); it cannot print anything now: kill, retry
                p.kill()
            else:
                p.send_signal(signal.SIGINT)  # ab prints what it has on SIGINT
            try:
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
        finally:
            LIVE.pop(p.pid, None)
            _write_live()
        if cut and wl["tool"] == "siege" and attempt < tries:
            hangs += 1
            log(f"  siege hung after its run (attempt {attempt}); retrying")
            time.sleep(2)
            continue
        break
    wall = time.monotonic() - t0
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"server_cpu_s": round((tree_ticks(root_pid) - srv_ticks0) / CLK_TCK, 2),
           "client_cpu_s": round(kids1.ru_utime + kids1.ru_stime
                                 - kids0.ru_utime - kids0.ru_stime, 2)}
    busy = foreign.stop()
    mem = sampler.finish()
    overflows1 = listen_overflows()
    # machine-wide, but nothing else here fills a listen queue
    mem["listen_overflows"] = (overflows1 - overflows0
                               if None not in (overflows0, overflows1) else None)
    text = out.decode(errors="replace")
    if wl["tool"] == "ab":
        m = parse_ab(text, wl["n"])
        if m["detail"].get("aborted") and m["requests"]:
            # ab gives up on the whole run when one request gets no answer
            # within -s seconds, printing only how many completed. That is a
            # server failure, not a harness one: keep the completed count,
            # count the rest as failed, and take the rate over wall time
            # (which includes the -s wait).
            m["rps"] = m["requests"] / wall
            m["duration_s"] = round(wall, 3)
            m["detail"]["note"] = ("ab stopped: a request got no answer within "
                                   "10 s; rate over wall time, no percentiles")
    elif wl["tool"] == "wrk":
        m = parse_wrk(text)
    elif wl["tool"] == "visitors":
        m = parse_visitors(text, wl)
    else:
        m = parse_siege(text)
        m["detail"]["hung_attempts"] = hangs + (1 if cut else 0)
    err = None
    if m["rps"] is None:
        err = f"could not parse {wl['tool']} output (exit {p.returncode})"
    if cut:
        err = (err + "; " if err else "") + f"cut at wall-clock limit {limit}s"
    return dict(cmd=cmd, exit=p.returncode, wall_s=round(wall, 3), metrics=m,
                mem=mem, error=err, raw=text[-4000:],
                loadavg=[round(load_before, 2), round(os.getloadavg()[0], 2)], **busy, **cpu)


# --------------------------------------------------------------------------
# Machine / versions
# --------------------------------------------------------------------------
def sh(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        return (r.stdout + r.stderr).strip()
    except Exception as e:  # noqa: BLE001
        return f"unavailable ({e.__class__.__name__})"


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    osname = "?"
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    sysctls = {}
    for k in ("net/core/somaxconn", "net/ipv4/tcp_tw_reuse",
              "net/ipv4/ip_local_port_range", "net/ipv4/tcp_max_syn_backlog"):
        try:
            with open("/proc/sys/" + k) as f:
                sysctls[k.replace("/", ".")] = " ".join(f.read().split())
        except OSError:
            pass
    return {"nproc": NPROC, "memory": mem, "kernel": platform.release(),
            "cpu": cpu, "os": osname, "python": platform.python_version(),
            "ulimit_nofile": sh(["bash", "-c", "ulimit -n"]), "sysctl": sysctls}


def versions():
    first = lambda s: s.splitlines()[0] if s else s  # noqa: E731
    v = {
        "nginx": first(sh(["nginx", "-v"])),
        "apache": first(sh(["apache2", "-v"])),
        "lighttpd": first(sh(["lighttpd", "-v"])),
        "h2o": first(sh(["h2o", "--version"])),
        "caddy": first(sh(["caddy", "version"])),
        "busybox": first(sh(["busybox"])),
        "siege": first(sh(["siege", "-V"])),
        "ab": first(sh(["ab", "-V"])),
        "wrk": first(sh(["wrk", "-v"])),
        "gcc": first(sh(["gcc", "--version"])),
    }
    if os.path.exists(PIKA_BIN):
        st = os.stat(PIKA_BIN)
        with open(PIKA_BIN, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        try:
            r = subprocess.run([PIKA_BIN, "--version"], capture_output=True,
                               text=True, timeout=5, stdin=subprocess.DEVNULL)
            ver = first(r.stdout.strip()) if r.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired):
            ver = ""
        ver = ver if ver and len(ver) < 100 else "pika"
        v["pika"] = (f"{ver} (binary built "
                     f"{datetime.datetime.fromtimestamp(st.st_mtime):%Y-%m-%d %H:%M}, "
                     f"sha256 {digest})")
        rev = sh(["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"])
        if re.fullmatch(r"[0-9a-f]{4,40}", rev):
            v["pika"] += f", repo HEAD {rev}"
    return v


# --------------------------------------------------------------------------
# Main loop
# --------------------------------------------------------------------------
class Interrupted(Exception):
    pass


def _on_signal(signum, _frame):
    # First signal wins: ignore further ones so a second Ctrl-C (or bench/run
    # forwarding SIGTERM) cannot interrupt the cleanup of the first.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def plan_only(a, names, wls, scripts, rounds):
    """--plan: what the run would measure and how long it should take."""
    servers = [CLASSES[n](PORT_BASE, "DOCROOT", a.tmp, PORT_BASE + TLS_PORT_OFFSET)
               for n in ALL_SERVERS if n in names]
    # (pika and the floor are built by the run; the peers must be installed)
    servers = [s for s in servers if s.name in ("pika", "floor") or not s.available()]
    parts = plan_seconds(wls, servers, rounds, scripts, a.quick)
    width = max(len(k) for k in parts)
    for k, t in parts.items():
        print(f"  {k:{width}}  {t / 60:6.1f} min")
    cells = sum(1 for w in wls for s in servers if not s.not_for(w)) * rounds
    print(f"{cells} cells of bench/run's own on {len(servers)} servers "
          f"({', '.join(s.name for s in servers)}), {rounds} round(s), "
          f"+ {sum(len(c) for _, c, _ in scripts)} scripted cells: "
          f"about {sum(parts.values()) / 60:.0f} min on the 2-core dev machine "
          "(cells measured again on a busy machine come on top)")


def main():
    global LIVE_FILE
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(ALL_SERVERS))
    ap.add_argument("--workloads", default=None,
                    help="only workloads whose id matches this regex (re.search)")
    ap.add_argument("--plan", action="store_true",
                    help="print the cells and how long they should take, run nothing")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tmp", required=True, help="scratch dir (bench/run makes it)")
    ap.add_argument("--floor-bin", required=True)
    ap.add_argument("--siege-shim", default=None,
                    help="LD_PRELOAD library from bench/siege-nocancel.c")
    ap.add_argument("--visitors-bin", default=None,
                    help="bench/visitors binary (bench/run builds it with cargo)")
    a = ap.parse_args()
    global SIEGE_SHIM, VISITORS_BIN
    SIEGE_SHIM = a.siege_shim if a.siege_shim and os.path.exists(a.siege_shim) else None
    VISITORS_BIN = a.visitors_bin

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)

    names = []
    for n in a.only.split(","):
        n = ALIASES.get(n.strip().lower(), n.strip().lower())
        if not n:
            continue
        if n not in CLASSES:
            sys.exit(f"unknown server '{n}' (known: {', '.join(ALL_SERVERS)})")
        if n not in names:
            names.append(n)
    every = workloads(a.quick)
    wls = [w for w in every if not a.workloads or re.search(a.workloads, w["id"])]
    # the cells of bench/rules, bench/dynamic and bench/slowreaders (scripted.py)
    scripts, script_ids = scripted.plan(a.workloads, names, a.quick)
    if not wls and not scripts:
        sys.exit(f"no workload id matches '{a.workloads}' (ids: "
                 f"{', '.join([w['id'] for w in every] + script_ids)})")
    rounds = 1 if a.quick else max(1, a.rounds)
    if a.plan:
        plan_only(a, names, wls, scripts, rounds)
        return 0
    os.makedirs(a.out, exist_ok=True)
    os.chmod(a.tmp, 0o755)  # workers run as www-data and must reach the docroot
    LIVE_FILE = os.path.join(a.tmp, "live_pids")
    docroot = os.path.join(a.tmp, "docroot")
    files = write_docroot(docroot)
    os.chmod(docroot, 0o755)
    rc = os.path.join(a.tmp, "siegerc")
    siegerc(rc)
    global CERT, KEY
    CERT, KEY = make_cert(a.tmp)
    Floor.bin = a.floor_bin

    servers, skipped = [], {}
    taken = set()
    for i, n in enumerate(ALL_SERVERS):
        if n not in names:
            continue
        # Preferred port base+1+i; if something else (not ours) holds it,
        # take the next free one rather than fail.
        port = PORT_BASE + 1 + i
        while not (port_free(port) and port_free(port + TLS_PORT_OFFSET)
                   and port_free(port + PROXY_PORT_OFFSET)) or port in taken:
            port += 10
        taken.add(port)
        srv = CLASSES[n](port, docroot, a.tmp, port + TLS_PORT_OFFSET)
        why = srv.available()
        if why:
            log(f"skipping {n}: {why}")
            skipped[n] = why
        else:
            servers.append(srv)

    # cells a server sits out, and why (the report says it under their table)
    not_run = {}
    for w in wls:
        for srv in servers:
            why = srv.not_for(w)
            if why:
                not_run.setdefault(w["id"], {})[srv.name] = why
    if not_run:
        for srv in servers:
            ids = [i for i, x in not_run.items() if srv.name in x]
            if ids:
                log(f"{srv.name} sits out {', '.join(ids)}: {not_run[ids[0]][srv.name]}")

    with open(rc) as f:
        rc_text = f.read()
    results = {
        "meta": {
            "mode": "quick" if a.quick else "full", "rounds": rounds,
            "servers": [s.name for s in servers], "skipped": skipped,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "finished": None, "elapsed_s": None, "interrupted": None,
            "machine": machine(), "versions": versions(), "files": files,
            "ports": {s.name: s.port for s in servers},
            "configs": {s.name: s.config_for_report() for s in servers},
            "siegerc": rc_text,
            "siege_shim": bool(SIEGE_SHIM),
            # a server sized per cell shows WORKERS for its worker count
            "commands": {s.name: " ".join(
                s.command("TMPDIR/INSTANCE", "TMPDIR/INSTANCE/CONF")
                if s.workers_for(None) is None else
                s.command("TMPDIR/INSTANCE", "TMPDIR/INSTANCE/CONF", workers="WORKERS"))
                         .replace(docroot, "DOCROOT").replace(a.tmp, "TMPDIR")
                         for s in servers},
            "workloads": wls,
            "scripted": {s.name: {"cells": [i for i, _ in chosen], "servers": srv}
                         for s, chosen, srv in scripts},
            "access_log": {s.name: s.access_log for s in servers},
            "not_run": not_run,
            "nofile": {"hard": _hard, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                       "configs": NOFILE},
        },
        "idle": [], "cells": [], "errors": [], "scripted": [],
    }
    out_json = os.path.join(a.out, "results.json")

    def save():
        tmp = out_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, out_json)

    t_start = time.monotonic()
    pause = 0.3 if a.quick else 0.5
    settle = 1.0 if a.quick else 2.0
    cold = [w for w in wls if w.get("cold")]
    warm = [w for w in wls if not w.get("cold")]
    save()
    try:
        for rnd in range(1, rounds + 1):
            # Every workload is run by every server in turn before the next
            # workload starts, so the servers' figures for one cell are taken
            # within a minute or two of each other; the order is reversed every
            # other round, so a drift of the machine favours nobody.
            order = servers if rnd % 2 else servers[::-1]
            log(f"round {rnd}/{rounds}: {', '.join(s.name for s in order)}")
            for wl in cold:
                for srv in order:
                    cold_burst(srv, wl, rnd, rc, results, save)
                    time.sleep(pause)
            # a server that sits out every warm workload selected starts no instance
            turns = [Turn(srv, rnd) for srv in order
                     if any(not srv.not_for(w) for w in warm)]
            try:
                for t in turns:
                    t.start(settle, files, results, save)
                for n_wl, wl in enumerate(warm, 1):
                    for t in turns:
                        t.run(wl, n_wl, rc, pause, settle, results, save)
            finally:
                for t in turns:
                    t.finish(results, save)
        if scripts:
            # The scripts start their own servers (configs with locations, a
            # php-fpm pool, clients that never read) and interleave their own
            # rounds; they run after the rounds above, every server of ours
            # stopped.
            log(f"scripted cells: {', '.join(s.name for s, _, _ in scripts)}")
            rows, errs, meta = scripted.run(
                scripts, rounds, a.quick, a.tmp, spawn, _forget, log)
            results["scripted"] += rows
            results["errors"] += [dict(round=None, server=e["script"], error=e["error"])
                                  for e in errs]
            results["meta"]["scripted"] = meta
            save()
    except Interrupted as e:
        results["meta"]["interrupted"] = str(e)
        log(f"interrupted by {e}: stopping what we started")
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        cleanup_all()
        results["meta"]["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        results["meta"]["elapsed_s"] = round(time.monotonic() - t_start, 1)
        save()
    bad = [c for c in results["cells"] if c.get("error")] + results["errors"]
    log(f"done in {results['meta']['elapsed_s']} s; {len(results['cells'])} cells, "
        f"{len(bad)} with errors; raw results in {out_json}")
    if results["meta"]["interrupted"]:
        return 130
    return 1 if bad else 0


# --------------------------------------------------------------------------
# How long a run takes (bench/run --plan), from what each cell costs: its
# tool's duration (ab: its count at the rate this machine's servers reach),
# and the harness's own time around it. The constants were measured on the
# 2-core dev machine (bench/README.md, Timing); a faster machine takes less.
# --------------------------------------------------------------------------
# ab's rate (requests/s) per cell, the peers' usual figure here, and the
# servers that are much slower at it (a factor)
AB_RATE = {"page17.html": 25_000, "img1700.jpg": 800, "page50.html": 18_000,
           "tls": 1_300, "cold": 15_000}
AB_SLOW = {"busybox": {"page17.html": 0.2, "page50.html": 0.1, "cold": 0.05},
           "apache": {"page17.html": 0.7, "page50.html": 0.6},
           "apache-buffered": {"page17.html": 0.7, "page50.html": 0.6},
           "caddy": {"tls": 0.3, "page17.html": 0.5, "page50.html": 0.6, "img1700.jpg": 0.8}}
# seconds the harness spends around each client run (its pause, starting the
# tool, joining the sampler), around each server's turn in a round (start,
# settle, content check, stop), and around a cold burst (start, stop, pause)
CELL_OVERHEAD = 1.0
SIEGE_OVERHEAD = 0.5  # siege's own start and "lifting the siege"
TURN_OVERHEAD = 5.0
COLD_OVERHEAD = 4.0


def cell_seconds(wl, srv):
    """The expected wall time of one cell on one server, overhead included."""
    if wl["tool"] == "siege":
        return int(wl["t"].rstrip("S")) + SIEGE_OVERHEAD + CELL_OVERHEAD
    if wl["tool"] == "wrk":
        return int(wl["d"].rstrip("s")) + CELL_OVERHEAD
    if wl["tool"] == "visitors":
        return wl["ramp"] + wl["d"] + CELL_OVERHEAD
    key = "cold" if wl.get("cold") else "tls" if wl.get("tls") else wl["path"]
    rate = AB_RATE[key] * AB_SLOW.get(srv, {}).get(key, 1.0)
    return wl["n"] / rate + (COLD_OVERHEAD if wl.get("cold") else CELL_OVERHEAD)


def plan_seconds(wls, servers, rounds, scripts, quick):
    """{part: seconds} of a run: each workload over every server that runs it,
    the servers' turns, and each script's cells."""
    out = {}
    for wl in wls:
        t = sum(cell_seconds(wl, s.name) + (TURN_OVERHEAD if s.workers_for(wl) not in
                                             (None, s.workers_for(None)) else 0)
                for s in servers if not s.not_for(wl))
        out[wl["id"]] = t * rounds
    out["(server turns)"] = TURN_OVERHEAD * len(servers) * rounds
    for s, chosen, srv in scripts:
        out[f"{s.name} ({len(chosen)} cells)"] = s.seconds(chosen, srv, rounds, quick)
    return out


def cold_burst(srv, wl, rnd, rc, results, save):
    """The cold-burst cell: a fresh instance, the burst the moment it accepts."""
    log(f"  {srv.name}: fresh instance for {wl['id']}")
    inst = Instance(srv, f"r{rnd}-cold", srv.workers_for(wl))
    try:
        t0 = time.monotonic()
        ready = inst.start(poll=0.005)
        # sample from the moment it is ready (after config parsing), and
        # faster: a burst lasts well under 1 s
        smp = MemSampler(inst.proc.pid, 0.05, port=srv.port)
        smp.start()
        cell = run_client(wl, srv.port, rc, inst.proc.pid, sampler=smp)
        cell["metrics"]["detail"]["ready_s"] = round(ready, 4)
        cell["metrics"]["detail"]["start_to_done_s"] = round(time.monotonic() - t0, 3)
    except RuntimeError as e:
        cell = dict(error=str(e), metrics=_empty(), mem={})
    finally:
        inst.stop()
    cell.update(round=rnd, server=srv.name, workload=wl["id"])
    if inst.workers is not None:
        cell["workers"] = inst.workers
    results["cells"].append(cell)
    _say(cell)
    inst.remove()
    save()


class Turn:
    """One server's part of a round: the instance that serves its warm
    workloads (idle memory and the content check first), kept running while
    the other servers take their turns. A server sized per cell (the floor:
    Server.workers_for) gets a fresh instance whenever a workload wants a
    worker count other than the running instance's. After an error the
    server sits out the rest of the round."""

    def __init__(self, srv, rnd):
        self.srv, self.rnd = srv, rnd
        self.inst = None
        self.failed = False
        self.lines = []  # access-log line counts of this round's instances
        self.idle = None

    def _error(self, e, results):
        log(f"  {self.srv.name}: ERROR {e}")
        results["errors"].append(dict(round=self.rnd, server=self.srv.name, error=str(e)))
        self.failed = True
        self._stop()

    def _stop(self):
        if self.inst:
            inst, self.inst = self.inst, None
            inst.stop()
            self.lines.append(inst.access_lines())
            inst.remove()

    def start(self, settle, files, results, save):
        srv = self.srv
        try:
            self.inst = Instance(srv, f"r{self.rnd}", srv.workers_for(None))
            self.inst.start()
            time.sleep(settle)  # let prefork pools spawn before 'idle'
            # idle memory first: the content check touches (and a server may
            # map) the files
            kb, nprocs = pss_tree(self.inst.proc.pid)
            check = verify(srv, files)
            self.idle = dict(round=self.rnd, server=srv.name, pss_kb=kb, procs=nprocs,
                             worker_private_kb=worker_private(self.inst.proc.pid), verify=check)
            if srv.tls:
                self.idle["tls"] = tls_session(srv.tls_port)
            if self.inst.workers is not None:
                self.idle["workers"] = self.inst.workers
            results["idle"].append(self.idle)
            log(f"  {srv.name}: idle PSS {kb / 1024:.1f} MiB in {nprocs} processes; "
                f"content check: {check}")
            if not check["index.html"].startswith("ok"):
                raise RuntimeError(f"{srv.name} does not serve index.html: {check}")
        except RuntimeError as e:
            self._error(e, results)
        save()

    def run(self, wl, n_wl, rc, pause, settle, results, save):
        if self.failed or self.srv.not_for(wl):
            return
        srv = self.srv
        try:
            want = srv.workers_for(wl)
            if want is not None and want != self.inst.workers:
                # stop and remove the running instance first (one port)
                self._stop()
                self.inst = Instance(srv, f"r{self.rnd}-{n_wl}-w{want}", want)
                self.inst.start()
                time.sleep(settle)  # let the workers fork
                kb, nprocs = pss_tree(self.inst.proc.pid)
                log(f"  {srv.name}: fresh instance with {want} workers for {wl['id']}: "
                    f"{nprocs} processes, PSS {kb / 1024:.1f} MiB")
            for attempt in range(1, BUSY_TRIES + 1):
                if self.inst.proc.poll() is not None:
                    raise RuntimeError(f"{srv.name} died (exit "
                                       f"{self.inst.proc.returncode}): {self.inst.tail()}")
                cell = run_client(wl, srv.port, rc, self.inst.proc.pid)
                cell.update(round=self.rnd, server=srv.name, workload=wl["id"],
                            attempt=attempt)
                if self.inst.workers is not None:
                    cell["workers"] = self.inst.workers
                results["cells"].append(cell)
                _say(cell)
                save()
                time.sleep(pause)
                # Someone else's build/fuzzer took a real share of the CPU:
                # measure again a bit later. All attempts are kept; report.py
                # prefers the quiet ones.
                if (cell.get("foreign_cpu_pct") or 0) <= BUSY_PCT or attempt == BUSY_TRIES:
                    break
                log(f"  other processes used {cell['foreign_cpu_pct']}% "
                    f"of the CPU during that cell; measuring it again")
                time.sleep(5 * pause)
        except RuntimeError as e:
            self._error(e, results)
            save()

    def finish(self, results, save):
        """Stops the instance and records the round's access-log line count."""
        self._stop()
        counted = [n for n in self.lines if n is not None]
        total = sum(counted) if counted else None
        if self.idle is not None:
            self.idle["access_log_lines"] = total
        if self.srv.access_log:
            log(f"  {self.srv.name}: access log: {total} lines")
        save()


def _say(cell):
    m = cell["metrics"]
    if cell.get("error"):
        log(f"  {cell['server']}: {cell['workload']}: ERROR {cell['error']}")
        return
    busy = cell.get("foreign_cpu_pct")
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    log(f"  {cell['server']}: {cell['workload']}: {fmt(m['rps'], '.0f')} req/s, "
        f"{fmt(m['mbps'], '.1f')} MB/s, failed {m['failed']}, "
        f"p50 {fmt(m['p50_ms'], '.2f')} ms, p99 {fmt(m['p99_ms'], '.2f')} ms, "
        f"peak PSS {cell['mem'].get('peak_pss_kb', 0) / 1024:.1f} MiB, "
        f"queue {cell['mem'].get('peak_accept_queue')}"
        + (f", other CPU {busy}%" if busy else ""))


if __name__ == "__main__":
    sys.exit(main())
