"""The cells that bench/rules, bench/dynamic and bench/slowreaders measure,
run by bench/run after its own workloads (imported by bench/harness.py).

Each of those scripts starts its own servers with the configs its cells need
(locations with rules, a php-fpm pool, clients that never read), so they run
as they are, through their command lines, and their figures are gathered into
results.json under "scripted" as rows of one shape:

    {"script", "cell" (the workload id, e.g. rules-ka-auth), "server", "round",
     "rps", "p99_ms", "failed", "server_us" (server CPU per request),
     "extra": {what the script measures besides}, "load"}

Cell ids carry the script's name first (rules-, dynamic-, slowreaders-), so
bench/run's --workloads regex selects them like any other cell, and --only
passes on the servers a script knows. What a script's cells leave out (a
peer it has no config for) is stated per script in NOT_RUN, and the report
says it under its table.
"""
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

# Seconds per cell and, for the slow readers, connections; chosen for the time
# budget of a full run (bench/README.md, Timing). Quick: the same shapes, short.
FULL = {"rules_seconds": 4, "dynamic_seconds": 5, "uploads": 30,
        "slow_seconds": 10, "slow_conns": (64, 500)}
QUICK = {"rules_seconds": 1, "dynamic_seconds": 1, "uploads": 20,
         "slow_seconds": 3, "slow_conns": (16,)}


def _module(script):
    """A bench script as a module, read without running it (the scripts run
    main() only as __main__)."""
    path = os.path.join(BENCH_DIR, script)
    loader = importlib.machinery.SourceFileLoader(f"bench_{script}", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _cells_of(script):
    """The CELLS list of a bench script, ids first."""
    return [c[0] for c in _module(script).CELLS]


def _help(script):
    r = subprocess.run([os.path.join(BENCH_DIR, script), "--help"], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    return r.stdout


def _one_of(cells):
    """A --cells regex that matches exactly these ids."""
    return "^(" + "|".join(re.escape(c) for c in cells) + ")$"


# why the static-only servers sit out every scripted cell
STATIC_ONLY = {"busybox": "busybox httpd serves static files only here",
               "floor": "the floor answers a fixed body: no rules, scripts or slow readers"}


class Script:
    name = "?"
    servers = ()          # the servers the script can start, in bench/run's names
    not_run = {}          # server -> why the script's cells leave it out

    def ids(self, quick):
        """[(workload id, the script's own cell id or spec)]: by default the ids
        of the script's CELLS, after its name."""
        return [(f"{self.name}-{c}", c) for c in _cells_of(self.name)]

    def argv(self, chosen, servers, rounds, seconds):
        """The script's command line for these cells and servers, up to its
        own options."""
        return [os.path.join(BENCH_DIR, self.name), "--rounds", str(rounds),
                "--seconds", str(seconds), "--cells", _one_of(c for _, c in chosen),
                "--only", ",".join(servers)]

    def runs(self, chosen, servers, rounds, quick, tmp):
        """-> [(argv, json path or None, parse(stdout, json) -> rows)]"""
        raise NotImplementedError

    def seconds(self, chosen, servers, rounds, quick):
        """The expected wall time of these cells (bench/run --plan)."""
        raise NotImplementedError


class Rules(Script):
    name = "rules"
    WHY = dict(STATIC_ONLY, **{
        s: "bench/rules has no config for it yet (one location per rule: allow, Basic "
           "auth with bcrypt, a header, gzip on the fly, precompressed siblings)"
        for s in ("apache", "apache-buffered", "lighttpd")},
        h2o="h2o 2.2 does allow/deny and Basic auth only in mruby scripts, not as "
            "configuration: not the same thing",
        **{"nginx-buffered": "bench/rules's nginx logs buffered already "
                             "(buffer=32k flush=1s)"})

    def __init__(self):
        # the servers bench/rules can start (its NAMES)
        self.servers = tuple(_module("rules").NAMES)
        self.not_run = {k: v for k, v in self.WHY.items() if k not in self.servers}

    def runs(self, chosen, servers, rounds, quick, tmp):
        k = QUICK if quick else FULL
        out = os.path.join(tmp, "rules")
        argv = self.argv(chosen, servers, rounds, k["rules_seconds"]) + ["--out", out]

        def parse(_stdout, data):
            rows = []
            for cid, by in (data or {}).items():
                for srv, xs in by.items():
                    for rnd, x in enumerate(xs, 1):
                        rows.append(dict(cell=f"rules-{cid}", server=srv, round=rnd,
                                         rps=x.get("rps"), p99_ms=x.get("p99_ms"),
                                         failed=x.get("non2xx"), server_us=x.get("cpu_us"),
                                         extra={}, load=x.get("load1")))
            return rows
        return [(argv, os.path.join(out, "results.json"), parse)]

    def seconds(self, chosen, servers, rounds, quick):
        k = QUICK if quick else FULL
        # a 1 s warm-up pass, then each cell on each server per round (+0.5 s wrk's start)
        return 3 + len(chosen) * len(servers) * (1.2 + rounds * (k["rules_seconds"] + 0.5))


class Dynamic(Script):
    name = "dynamic"
    # why a peer has no row in some or all of the cells (bench/dynamic's server
    # functions return no command for a kind they are not set up for)
    WHY = {
        "nginx": "no CGI cells: nginx runs no CGI itself (only through a FastCGI "
                 "bridge such as fcgiwrap, which is not CGI)",
        "lighttpd": "no PHP cells: bench/dynamic runs lighttpd for CGI only",
        "h2o": "bench/dynamic has no h2o config yet (h2o runs CGI through its "
               "fastcgi-cgi bridge, PHP through fastcgi.connect)",
        "caddy": "bench/dynamic has no Caddy config yet (Caddy 2.6 has no CGI without a "
                 "plugin; PHP through php_fastcgi)",
        "apache-buffered": "bench/dynamic runs Apache with its default log only",
        "nginx-buffered": "bench/dynamic runs nginx with its default log only",
    }

    def __init__(self):
        # the servers bench/dynamic can start (its SERVERS), so a server added
        # there runs here without a change
        self.servers = tuple(_module("dynamic").SERVERS)
        self.not_run = dict(STATIC_ONLY, **{k: v for k, v in self.WHY.items()
                                            if k not in self.servers or k in ("nginx", "lighttpd")})

    def runs(self, chosen, servers, rounds, quick, tmp):
        k = QUICK if quick else FULL
        out = os.path.join(tmp, "dynamic.json")
        argv = self.argv(chosen, servers, rounds, k["dynamic_seconds"]) + [
            "--uploads", str(k["uploads"]), "--json", out]

        def parse(_stdout, data):
            return [dict(cell=f"dynamic-{x['cell']}", server=x["server"],
                         round=x.get("round", 0) + 1, rps=x.get("rps"), p99_ms=x.get("p99_ms"),
                         failed=x.get("failed"), server_us=x.get("cpu_us_per_req"),
                         extra={"fpm_us": x.get("fpm_cpu_us_per_req")}
                         if x.get("fpm_cpu_us_per_req") is not None else {},
                         load=x.get("load"))
                    for x in (data or [])]
        return [(argv, out, parse)]

    # seconds around each cell: start, 1 s settle, 1 s warm-up, stop; the 10 MB
    # uploads go at about 5 a second here
    AROUND = 3.0
    UPLOAD_RATE = 5.0

    def seconds(self, chosen, servers, rounds, quick):
        k = QUICK if quick else FULL
        t = 3  # the scripts, the php-fpm pool
        for _, cell in chosen:
            n = sum(1 for s in servers
                    if not (s == "lighttpd" and not cell.startswith("cgi"))
                    and not (s == "nginx" and cell.startswith("cgi")))
            run = (k["uploads"] / self.UPLOAD_RATE if "upload" in cell
                   else k["dynamic_seconds"])
            t += n * rounds * (run + self.AROUND)
        return t


# bench/slowreaders' summary line (until it writes JSON)
SLOW_LINE = re.compile(
    r"probes=(?P<probes>\d+) failed=(?P<failed>\d+) p50=(?P<p50>[\d.]+) p90=(?P<p90>[\d.]+) "
    r"p99=(?P<p99>[\d.]+) max=(?P<max>[\d.]+) ms; processes min/max (?P<pmin>\d+)/(?P<pmax>\d+); "
    r"reconnects (?P<reconnects>\d+); load (?P<load0>[\d.]+) -> (?P<load1>[\d.]+)")


class SlowReaders(Script):
    """One run per server, mode and connection count (and TLS, if the script
    offers it): the fresh client's latency while N connections never read."""
    name = "slowreaders"
    servers = ("pika", "nginx")
    not_run = dict(STATIC_ONLY, **{s: "bench/slowreaders starts pika or nginx" for s in
                                   ("apache", "apache-buffered", "lighttpd", "h2o", "caddy",
                                    "nginx-buffered")})

    def __init__(self):
        self.help = _help("slowreaders")

    def tls(self):
        return "--tls" in self.help

    def ids(self, quick):
        k = QUICK if quick else FULL
        out = []
        for tls in ((False, True) if self.tls() else (False,)):
            for mode in ("big", "small"):
                for c in k["slow_conns"]:
                    out.append((f"slowreaders-{'tls-' if tls else ''}{mode}-c{c}",
                                dict(mode=mode, conns=c, tls=tls)))
        return out

    def runs(self, chosen, servers, rounds, quick, tmp):
        k = QUICK if quick else FULL
        runs = []
        for rnd in range(1, rounds + 1):
            for wid, spec in chosen:
                for srv in (servers if rnd % 2 else servers[::-1]):
                    argv = [os.path.join(BENCH_DIR, "slowreaders"), "--server", srv,
                            "--conns", str(spec["conns"]), "--mode", spec["mode"],
                            "--seconds", str(k["slow_seconds"])]
                    if srv == "nginx":
                        # as in the main cells: a worker per core
                        argv += ["--nginx-workers", str(os.cpu_count() or 1)]
                    if spec["tls"]:
                        argv.append("--tls")
                    out = None
                    if "--json" in self.help:
                        out = os.path.join(tmp, f"slowreaders-{srv}-{wid}-r{rnd}.json")
                        argv += ["--json", out]
                    runs.append((argv, out, self._parser(wid, srv, rnd)))
        return runs

    def seconds(self, chosen, servers, rounds, quick):
        k = QUICK if quick else FULL
        # start, 0.5 s settle, opening the connections, stop
        return len(chosen) * len(servers) * rounds * (k["slow_seconds"] + 1.0)

    @staticmethod
    def _parser(wid, srv, rnd):
        def parse(stdout, data):
            if isinstance(data, dict):
                v = {k: data.get(k) for k in ("probes", "failed", "p50_ms", "p90_ms",
                                              "p99_ms", "max_ms", "reconnects")}
                v["procs"] = f"{data.get('procs_min')}-{data.get('procs_max')}"
                load = data.get("load_before")
            else:
                m = SLOW_LINE.search(stdout)
                if not m:
                    return []
                g = m.groupdict()
                v = {"probes": int(g["probes"]), "failed": int(g["failed"]),
                     "p50_ms": float(g["p50"]), "p90_ms": float(g["p90"]),
                     "p99_ms": float(g["p99"]), "max_ms": float(g["max"]),
                     "reconnects": int(g["reconnects"]), "procs": f"{g['pmin']}-{g['pmax']}"}
                load = float(g["load0"])
            return [dict(cell=wid, server=srv, round=rnd, rps=None, p99_ms=v["p99_ms"],
                         failed=v["failed"], server_us=None,
                         extra={k: v[k] for k in ("probes", "p50_ms", "p90_ms", "max_ms",
                                                  "reconnects", "procs")},
                         load=load)]
        return parse


SCRIPTS = (Rules, Dynamic, SlowReaders)


def plan(regex, names, quick):
    """[(script, [(workload id, spec)], servers)] for the scripts with a cell
    that `regex` (None: all) selects and a server that `names` (bench/run's
    --only) lists, and every id of theirs (for the "no workload matches"
    message)."""
    todo, every = [], []
    for cls in SCRIPTS:
        s = cls()
        ids = s.ids(quick)
        every += [i for i, _ in ids]
        chosen = [(i, c) for i, c in ids if not regex or re.search(regex, i)]
        servers = [n for n in names if n in s.servers]
        if chosen and servers:
            todo.append((s, chosen, servers))
    return todo, every


LOCK = "/tmp/pika-bench.lock"


def lock_fd():
    """bench/run's lock, held on its fd 9 (and given to the harness), passed on
    to a script as its fd 9: a script that takes the lock itself when run alone
    (bench/slowreaders) sees it held for it, instead of waiting for bench/run.
    The servers the harness starts get no such descriptor."""
    try:
        return (9,) if os.readlink("/proc/self/fd/9") == LOCK else ()
    except OSError:
        return ()


def run(todo, rounds, quick, tmp, spawn, finish, log, limit=3600):
    """Runs the planned scripts one after another; returns (rows, errors,
    {script: {"cells", "servers", "not_run", "argv", "elapsed_s"}}).
    `spawn(argv, **popen)` starts a process the caller tracks, `finish(p)`
    forgets it."""
    import time
    rows, errors, meta = [], [], {}
    for s, chosen, servers in todo:
        t0 = time.monotonic()
        argvs = []
        for argv, out, parse in s.runs(chosen, servers, rounds, quick, tmp):
            log(f"  {s.name}: {' '.join(os.path.relpath(x, BENCH_DIR) if x.startswith(BENCH_DIR) else x for x in argv)}")
            argvs.append(argv)
            p = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, pass_fds=lock_fd())
            # (an interrupt propagates from here with p still tracked: the
            # caller's cleanup stops it and the servers it started)
            try:
                stdout, _ = p.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, _ = p.communicate()
                errors.append(dict(script=s.name, error=f"cut after {limit} s: {' '.join(argv)}"))
            finish(p)
            text = stdout.decode(errors="replace")
            data = None
            if out and os.path.exists(out):
                try:
                    with open(out) as f:
                        data = json.load(f)
                except ValueError:
                    data = None
            got = parse(text, data)
            if p.returncode != 0 or not got:
                errors.append(dict(script=s.name, error=f"exit {p.returncode}, "
                                   f"{len(got)} rows: {' '.join(argv)}: {text[-800:]}"))
            for r in got:
                r["script"] = s.name
                log(f"  {r['server']}: {r['cell']}: "
                    + ", ".join(f"{k} {v}" for k, v in r.items()
                                if k in ("rps", "p99_ms", "failed", "server_us") and v is not None))
            rows += got
        meta[s.name] = {"cells": [i for i, _ in chosen], "servers": servers,
                        "not_run": s.not_run,
                        "argv": [[x.replace(tmp, "TMPDIR") for x in v] for v in argvs],
                        "elapsed_s": round(time.monotonic() - t0, 1)}
    return rows, errors, meta
