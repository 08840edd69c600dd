#!/usr/bin/env python3
"""Turn bench results.json into RESULTS.md and a requests/s bar chart.

    python3 bench/report.py OUT/results.json [MORE.json ...] --md FILE --png FILE

Several results files can be merged (e.g. peers from one run, pika from a
later `bench/run --only pika --out bench/out/pika`): for a server present in
more than one file, the LAST file's measurements are used. Medians are taken
across rounds; only cells that produced parseable output count.
"""
import argparse
import json
import os
import statistics
import sys

ORDER = ["pika", "nginx", "nginx-buffered", "apache", "apache-buffered", "lighttpd", "h2o",
         "caddy", "busybox", "floor"]
COLORS = {"pika": "#e6a100", "nginx": "#009639", "nginx-buffered": "#6cc58a",
          "apache": "#c92037", "apache-buffered": "#e0808d",
          "lighttpd": "#3b6db3", "h2o": "#7b3fa0", "caddy": "#1f9fb4", "busybox": "#7a7a7a", "floor": "#333333"}
METRICS = ("rps", "mbps", "failed", "retries", "p50_ms", "p90_ms", "p99_ms", "avg_ms",
           "max_ms", "duration_s")
# the p99 goal of issue #19: pika's p99 at most this many times nginx's
P99_GOAL = 2.0


def load(paths):
    merged = None
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        r["meta"]["source"] = p
        if merged is None:
            merged = r
            merged["meta"]["sources"] = [p]
            continue
        mine = set(r["meta"]["servers"])
        for key in ("cells", "idle", "errors"):
            merged[key] = [c for c in merged[key] if c["server"] not in mine] + r[key]
        # the scripts' cells (bench/scripted.py): a later file's rows replace
        # the earlier ones of the same cell and server
        later = {(x["cell"], x["server"]) for x in r.get("scripted", [])}
        merged["scripted"] = [x for x in merged.get("scripted", [])
                              if (x["cell"], x["server"]) not in later] + r.get("scripted", [])
        for name, sm in r["meta"].get("scripted", {}).items():
            merged["meta"].setdefault("scripted", {})[name] = sm
        m, n = merged["meta"], r["meta"]
        m["servers"] = [s for s in m["servers"] if s not in mine] + n["servers"]
        for k in ("versions", "configs", "commands", "ports", "access_log", "skipped"):
            m.setdefault(k, {}).update({s: v for s, v in n.get(k, {}).items()
                                        if s in mine or k == "versions"})
        for s in mine:
            m["skipped"].pop(s, None)
        for wid, why in n.get("not_run", {}).items():
            m.setdefault("not_run", {}).setdefault(wid, {}).update(why)
        m["sources"].append(p)
        m.setdefault("runs", []).append({"source": p, "servers": n["servers"],
                                         "started": n["started"],
                                         "elapsed_s": n["elapsed_s"]})
        known = {w["id"] for w in m["workloads"]}
        m["workloads"] += [w for w in n["workloads"] if w["id"] not in known]
    return merged


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def busy_pct(c):
    """% of the machine's CPU used by other people's processes in the cell."""
    return c.get("foreign_cpu_pct")


def summarize(res, max_busy=None):
    """{(workload, server): {metric: median, 'n': rounds, 'peak_pss_kb': ..}}
    With max_busy, rounds of a cell measured while other work used more than
    max_busy % of the CPU are left out, as long as a quieter round remains."""
    groups = {}
    for c in res["cells"]:
        groups.setdefault((c["workload"], c["server"]), []).append(c)
    out = {}
    for key, cells in groups.items():
        ok = [c for c in cells if not c.get("error")]
        dropped = 0
        if max_busy is not None:
            quiet = [c for c in ok if (busy_pct(c) or 0) <= max_busy]
            if quiet:
                dropped = len(ok) - len(quiet)
                ok = quiet
        s = {"n": len(ok), "dropped": dropped,
             "busy": med([busy_pct(c) for c in ok]),
             "errors": [c["error"] for c in cells if c.get("error")]}
        for m in METRICS:
            s[m] = med([c["metrics"].get(m) for c in ok])
        s["peak_pss_kb"] = med([c["mem"].get("peak_pss_kb") for c in ok if c.get("mem")])
        s["peak_procs"] = med([c["mem"].get("peak_procs") for c in ok if c.get("mem")])
        s["peak_worker_private_kb"] = med([c["mem"].get("peak_worker_private_kb") for c in ok
                                           if c.get("mem")])
        s["max_procs"] = med([c["mem"].get("max_procs") for c in ok if c.get("mem")])
        s["listen_overflows"] = med([c["mem"].get("listen_overflows") for c in ok
                                     if c.get("mem")])
        for d in ("connects", "slow_connects", "closed_idle", "told_close",
                  "client_cpu_wait_s", "client_lag_max_ms"):  # visitors
            s[d] = med([c["metrics"].get("detail", {}).get(d) for c in ok])
        s["peak_queue"] = med([c["mem"].get("peak_accept_queue") for c in ok if c.get("mem")])
        s["ab_aborted"] = sum(1 for c in ok if c["metrics"].get("detail", {}).get("aborted"))
        s["rps_all"] = [c["metrics"].get("rps") for c in ok]
        for d in ("ready_s", "start_to_done_s"):
            s[d] = med([c["metrics"].get("detail", {}).get(d) for c in ok])
        # worker count of a server sized per cell (the floor); results.json
        # files from before that have no "workers": None
        s["workers"] = med([c.get("workers") for c in ok])
        # which side the cell was bound by; results.json files from before
        # these were measured have neither: None
        s["server_us"] = med([c["server_cpu_s"] * 1e6 / c["metrics"]["requests"] for c in ok
                              if c.get("server_cpu_s") is not None
                              and c["metrics"].get("requests")])
        s["client_pct"] = med([100 * c["client_cpu_s"] / c["wall_s"] for c in ok
                               if c.get("client_cpu_s") is not None and c.get("wall_s")])
        out[key] = s
    return out


def servers_in(res):
    present = (set(res["meta"]["servers"]) | {c["server"] for c in res["cells"]}
               | {x["server"] for x in res.get("scripted", [])})
    return [s for s in ORDER if s in present]


def f(v, fmt=".0f", none="–"):
    return none if v is None else format(v, fmt)


def fms(v):
    if v is None:
        return "–"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def md_table(header, rows, left=1):
    """Markdown table; the first `left` columns are left-aligned (text), the
    rest right-aligned (numbers)."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def floor_fake(w):
    """floor always sends 1400 bytes; only index.html workloads match that."""
    return w["path"] != "index.html"


def keepalive(w):
    """A cell whose connections stay open for the whole run (wrk keep-alive)."""
    return w["tool"] == "wrk" and not w.get("close")


def visitors(w):
    """A cell of bench/visitors: browser-like clients with think time."""
    return w["tool"] == "visitors"


def p99_section(wls, summ, servers):
    """pika's p99 beside nginx's where issue #19 sets the goal: wrk -c100
    keep-alive and the visitors cells."""
    cells = [w for w in wls if visitors(w) or (w["tool"] == "wrk" and w["c"] in (100, 500)
                                               and not w.get("close") and not w.get("tls")
                                               and not w.get("lua"))]
    cells = [w for w in cells if (w["id"], "pika") in summ]
    refs = [r for r in ("nginx", "nginx-buffered") if r in servers]
    if not cells or not refs:
        return []
    cols = [s for s in servers if any((w["id"], s) in summ for w in cells)]
    L = [f"## p99 latency against nginx (goal: pika ≤ {P99_GOAL:g} × nginx's)\n",
         "p99 in ms (median across rounds) where issue #19 sets the goal: busy "
         "keep-alive clients (wrk -c100, -c500) and browser-like visitors; for the "
         "visitors also no failures and no retries. *pika ÷ best peer*: against the "
         "lowest p99 of the peers that keep connections alive (not busybox, not the "
         "floor; issue #32 asks for ≤ 1 at 100 and 500 kept-alive clients).\n"]
    hdr = (["workload"] + cols + [f"pika ÷ {r}" for r in refs] + ["pika ÷ best peer"]
           + ["goal met", "pika: closed idle"])
    rows = []
    for w in cells:
        p = summ[(w["id"], "pika")]
        row = [w["label"]] + [fms(summ.get((w["id"], s), {}).get("p99_ms")) for s in cols]
        row += [ratio(p.get("p99_ms"), summ.get((w["id"], r), {}).get("p99_ms")) for r in refs]
        # issue #32: at or below the best peer's p99 (the floor is no peer, and
        # busybox keeps no connection alive: its p99 is of another cell)
        peers = [(summ[(w["id"], s)]["p99_ms"], s) for s in cols
                 if s not in ("pika", "floor", "busybox")
                 and summ.get((w["id"], s), {}).get("p99_ms")]
        best = min(peers) if peers else None
        row.append(f"{ratio(p.get('p99_ms'), best[0])} ({best[1]})" if best else "–")
        base = summ.get((w["id"], "nginx"), {}).get("p99_ms")
        if p.get("p99_ms") is None or base is None:
            met = "–"
        else:
            why = []
            if p["p99_ms"] > P99_GOAL * base:
                why.append(f"p99 {p['p99_ms'] / base:.1f} × nginx's")
            if visitors(w) and p.get("failed"):
                why.append(f"{f(p['failed'])} failed")
            if visitors(w) and p.get("retries"):
                why.append(f"{f(p['retries'])} retried")
            met = "yes" if not why else "**no**: " + ", ".join(why)
        rows.append(row + [met, f(p.get("closed_idle")) if visitors(w) else ""])
    L.append(md_table(hdr, rows))
    L.append("\nThe goal is judged against nginx with its default log "
             "(a write per request); nginx-buffered is nginx with "
             "`access_log ... buffer=32k flush=1s`, as production sites run it. "
             "*pika: closed idle*: kept connections pika closed while a visitor "
             "was thinking (found closed before reuse, so no retry; the issue "
             "allows it only at `keepalive_timeout`).\n")
    return L


def visitors_table(w, summ, servers, has_pika, not_run, first):
    """The table of one visitors cell: latencies, failures apart from retries,
    what became of the connections, the server's memory and processes, and
    the client's CPU (it must not be the bottleneck)."""
    hdr = ["server", "req/s", "failed", "retried", "p50 ms", "p90 ms", "p99 ms",
           "max ms", "conns opened", "slow conns", "listen overflows", "closed idle",
           "told close", "max queued",
           "peak PSS MiB", "procs (max)", "server CPU µs/req", "client CPU %",
           "client CPU wait s", "client late ms", "rounds"]
    if has_pika:
        hdr.append("pika p99 ÷ this")
    pika_p99 = summ.get((w["id"], "pika"), {}).get("p99_ms")
    rows = []
    for s in servers:
        x = summ.get((w["id"], s))
        if not x:
            continue
        if x["n"] == 0:
            tail = ["0"] + ([""] if has_pika else [])
            rows.append([s, "error"] + [""] * (len(hdr) - 2 - len(tail)) + tail)
            continue
        row = [s, f(x["rps"]), f(x["failed"]), f(x["retries"]), fms(x["p50_ms"]),
               fms(x["p90_ms"]), fms(x["p99_ms"]), fms(x["max_ms"]), f(x["connects"]),
               f(x["slow_connects"]), f(x["listen_overflows"]), f(x["closed_idle"]), f(x["told_close"]), f(x["peak_queue"]),
               f(x["peak_pss_kb"] / 1024 if x["peak_pss_kb"] else None, ".1f"),
               f(x["max_procs"]), f(x["server_us"], ".1f"), f(x["client_pct"]),
               f(x["client_cpu_wait_s"], ".1f"), fms(x["client_lag_max_ms"]), str(x["n"]) + (f" (+{x['dropped']} busy)" if x["dropped"] else "")]
        if has_pika:
            row.append("—" if s == "pika" else ratio(pika_p99, x["p99_ms"]))
        rows.append(row)
    L = [md_table(hdr, rows)]
    if not first:
        L.append("\nColumns as in the first visitors table.")
    else:
        L.append("\nEach visitor (`bench/visitors`) GETs "
                 f"`{w['path']}`, then its {len(w['assets'])} assets over up to "
                 f"{w['conns']} kept-alive connections, thinks {w['think']} s, and "
                 f"again; they arrive over the first {w['ramp']} s, and only requests "
                 f"started in the {w['d']} s after that count. Latency: from the start "
                 "of a request to its last byte, connecting (and a retry) included. "
                 f"*failed*: no whole answer within {w['timeout']} s, or an error. "
                 "*retried*: sent on a kept-alive connection that the server closed "
                 "under it before any byte of the answer, and sent again on a new "
                 "connection, as a browser does; counted apart from failures. "
                 "*slow conns*: connections that took 1 s or more to open: the "
                 "server's listen queue was full, the kernel dropped the SYN and the "
                 "client sent it again after 1 s (*listen overflows*, the kernel's "
                 "count for the whole machine, says how often), or the client itself "
                 "waited that long for a CPU (*client CPU wait*). "
                 "*closed idle*: kept connections found closed by the server before "
                 "reuse (a browser checks, and opens a new one without a retry). "
                 "*told close*: answers that said `Connection: close`. *procs (max)*: "
                 "most processes of the server in one sample (every 1 s). *client "
                 "CPU*: the visitors process, one thread, in % of one core: near "
                 "100% it would be the bottleneck. *client CPU wait*: seconds its "
                 "threads were ready to run but waited for a core (schedstat): time "
                 "the machine, not the server, added to the latencies (on a busy "
                 "machine, or beside a server with many runnable processes). *client "
                 "late*: the longest its own event loop stalled (it asks for a 10 ms "
                 "tick over the measured window and notes how late each came): a "
                 "latency far above it is the server's. "
                 "Connections, slow ones, closed idle and told close count for the "
                 "requests started in the measured window.")
    for s, why in not_run.items():
        L.append(f"\n{s}: not run here: {why}.")
    errs = [f"{s}: {e}" for s in servers for e in summ.get((w["id"], s), {}).get("errors", [])]
    if errs:
        L.append("\nErrors: " + "; ".join(sorted(set(errs))))
    L.append("")
    return L


def tls_note(t):
    """What `openssl s_client -reconnect` got from a server's HTTPS port."""
    if not t:
        return ""
    if t.get("error"):
        return "error: " + t["error"][:80]
    return f"{t['protocol']}, {t['cipher']}, resumed {t['resumed']}"


def scripted_summary(res):
    """{(script, cell): {server: medians across rounds}} of the scripts' rows
    (bench/scripted.py), in the order they ran."""
    groups = {}
    for x in res.get("scripted", []):
        groups.setdefault((x["script"], x["cell"]), {}).setdefault(x["server"], []).append(x)
    out = {}
    for key, by in groups.items():
        out[key] = {}
        for srv, xs in by.items():
            m = {k: med([x.get(k) for x in xs]) for k in ("rps", "p99_ms", "server_us", "load")}
            m["failed"] = sum(x.get("failed") or 0 for x in xs)
            m["n"] = len(xs)
            for k in sorted({k for x in xs for k in x.get("extra", {})}):
                vals = [x["extra"].get(k) for x in xs]
                m[k] = (med(vals) if all(isinstance(v, (int, float)) or v is None for v in vals)
                        else ", ".join(sorted({str(v) for v in vals if v is not None})))
            out[key][srv] = m
    return out


SCRIPT_TITLES = {
    "rules": ("Per-location rules (`bench/rules`)",
              "One docroot, one location per rule, every server configured the same "
              "way: `allow 127.0.0.1` (all else denied), Basic auth (bcrypt `-C 5`, the "
              "credential sent with every request), one added header, gzip on the fly "
              "(level 6), precompressed siblings; `wrk -t2 -c50` keep-alive and "
              "`Connection: close` on a 1,400-byte page, keep-alive with "
              "`Accept-Encoding: gzip` on a 50 KB page for the two compression cells; two "
              "workers each (Caddy: `GOMAXPROCS=2`), an access log (pika and nginx: "
              "combined, buffered; Caddy: JSON, a write a record). Rounds interleaved by "
              "the script, the server order flipped each round."),
    "dynamic": ("Dynamic content (`bench/dynamic`)",
                "CGI (a shell script, a C program) at 20 clients, PHP through one "
                "php-fpm pool (`pm = static`, 16 children, a unix socket, the same pool "
                "for every server) at 20 and 100 clients (`wrk`, kept-alive), a 10 MB "
                "POST to PHP at 20 clients (`ab`). *php-fpm CPU*: the pool's CPU per "
                "request, apart from the server's."),
    "slowreaders": ("Clients that stop reading (`bench/slowreaders`)",
                    "N connections with a 4 KiB receive buffer pipeline GETs and never "
                    "read (`big`: 8 × a 2 MB file each, `small`: 1,000 × 20 KB; reopened "
                    "when cut) while a prober opens a fresh connection every 100 ms for a "
                    "15-byte page: its latency (a probe unanswered within 5 s counts as "
                    "5 s and failed), and the server's processes over the run."),
}


def scripted_sections(res, sc, servers, has_pika):
    """The tables of the scripts' cells, one per script, servers as rows."""
    if not sc:
        return []
    meta = res["meta"].get("scripted", {})
    L = ["## Scripted cells\n",
         "Run by `bench/run` after the cells above, each script with its own servers "
         "and configs (see `bench/README.md`); medians across rounds, *failed* summed "
         "over them, the 1-min load average read before each cell.\n"]
    for script in ("rules", "dynamic", "slowreaders"):
        cells = [(c, by) for (s, c), by in sc.items() if s == script]
        if not cells:
            continue
        title, about = SCRIPT_TITLES[script]
        L.append(f"### {title}\n")
        L.append(about + "\n")
        rows = []
        if script == "slowreaders":
            hdr = ["cell", "server", "probes", "failed", "p50 ms", "p90 ms", "p99 ms",
                   "max ms", "processes", "reconnects", "rounds", "load"]
            for c, by in cells:
                for srv in [s for s in servers if s in by]:
                    x = by[srv]
                    rows.append([c, srv, f(x.get("probes")), f(x["failed"]), fms(x.get("p50_ms")),
                                 fms(x.get("p90_ms")), fms(x["p99_ms"]), fms(x.get("max_ms")),
                                 x.get("procs", "–"), f(x.get("reconnects")), x["n"],
                                 f(x["load"], ".1f")])
            L.append(md_table(hdr, rows, left=2))
        else:
            fpm = script == "dynamic"
            hdr = (["cell", "server", "req/s", "p99 ms", "failed", "server CPU µs/req"]
                   + (["php-fpm CPU µs/req"] if fpm else []) + ["rounds", "load"]
                   + (["pika ÷ this"] if has_pika else []))
            for c, by in cells:
                for srv in [s for s in servers if s in by]:
                    x = by[srv]
                    row = [c, srv, f(x["rps"]), fms(x["p99_ms"]), f(x["failed"]),
                           f(x["server_us"], ".1f")]
                    if fpm:
                        row.append(f(x.get("fpm_us")))
                    row += [x["n"], f(x["load"], ".1f")]
                    if has_pika:
                        row.append("—" if srv == "pika" else
                                   ratio(by.get("pika", {}).get("rps"), x["rps"]))
                    rows.append(row)
            L.append(md_table(hdr, rows, left=2))
        m = meta.get(script, {})
        for srv, why in m.get("not_run", {}).items():
            if srv in servers:
                L.append(f"\n{srv}: not run here: {why}.")
        if m.get("argv"):
            L.append("\nCommand: `" + " ".join(os.path.basename(x) if i == 0 else x
                                              for i, x in enumerate(m["argv"][0]))
                     + "`" + (f" (and {len(m['argv']) - 1} more like it)"
                              if len(m["argv"]) > 1 else "")
                     + f"; {m.get('elapsed_s')} s in all.")
        L.append("")
    return L


def floor_workers(res, summ):
    """{workload id: floor's worker count} when the results record it (runs
    since the floor is sized per cell), else {} (older results.json: the
    floor ran 2 x nproc workers in every cell)."""
    return {w["id"]: summ[(w["id"], "floor")]["workers"]
            for w in res["meta"]["workloads"]
            if summ.get((w["id"], "floor"), {}).get("workers") is not None}


def write_md(res, summ, path, png, max_busy=None):
    meta = res["meta"]
    servers = servers_in(res)
    has_pika = "pika" in servers
    wls = [w for w in meta["workloads"]
           if any((w["id"], s) in summ for s in servers)]
    fw = floor_workers(res, summ) if "floor" in servers else {}
    pool = 2 * meta["machine"]["nproc"]
    L = []
    L.append("# pika benchmark results\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    srcs = ", ".join(f"`{os.path.relpath(os.path.abspath(p), repo)}`"
                     for p in meta.get("sources", []))
    L.append("Generated by `bench/run` (see `bench/README.md`) from " + srcs +
             ". Do not edit by hand: rerun `bench/report.py`.\n")
    runs = meta.get("runs")
    L.append(f"- Mode: **{meta['mode']}**, {meta['rounds']} round(s); values are "
             f"**medians across rounds**.")
    L.append(f"- Run started {meta['started']}, took {meta.get('elapsed_s') or '?'} s"
             + (f" (+ merged runs: " + ", ".join(
                 f"{', '.join(r['servers'])} started {r['started']}, {r['elapsed_s']} s"
                 for r in runs) + ")" if runs else "") + ".")
    if meta.get("interrupted"):
        L.append(f"- **The run was interrupted ({meta['interrupted']}); tables are partial.**")
    L.append("- Servers measured: " + ", ".join(servers) + ".")
    busy = [busy_pct(c) for c in res["cells"] if busy_pct(c) is not None]
    if busy:
        nd = sum(x["dropped"] for x in summ.values())
        L.append(f"- CPU used by *other* processes (not this benchmark: builds, "
                 f"tests, fuzzers of people sharing the machine) during the cells: "
                 f"median {statistics.median(busy):.0f}%, max {max(busy):.0f}% of the "
                 f"machine." + (f" {nd} cell-round(s) measured while that exceeded "
                                f"{max_busy:g}% were left out of the medians (a quieter "
                                f"round of the same cell was kept)." if nd else "")
                 + (" **Much of this run shared the CPU with other work: treat "
                    "absolute numbers as noisy.**"
                    if statistics.median(busy) > 10 else ""))
    loads = [c["loadavg"][1] for c in res["cells"] if c.get("loadavg")]
    if loads:
        nproc = meta["machine"]["nproc"]
        L.append(f"- 1-min load average after each cell: median "
                 f"{sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f} on {nproc} "
                 f"cores (it also counts processes waiting on disk, ours and others', "
                 f"so it can be high with little CPU contention: the CPU share "
                 f"above is the better signal).")
    for s, why in meta.get("skipped", {}).items():
        L.append(f"- **{s} was not measured: {why}.**")
    if not has_pika:
        L.append("- pika ratios are omitted because pika was not measured in this run.")
    L.append("")

    # ---- summary matrix --------------------------------------------------
    L.append("## Summary: requests/s (median)\n")
    hdr = ["workload"] + servers + (["floor workers"] if fw else [])
    rows = []
    not_run = meta.get("not_run", {})
    for w in wls:
        rows.append([w["label"]] + [
            "n/r" if s in not_run.get(w["id"], {}) else
            f(summ.get((w["id"], s), {}).get("rps"))
            + ("†" if s == "floor" and floor_fake(w) and (w["id"], s) in summ else "")
            for s in servers] + ([f(fw.get(w["id"]))] if fw else []))
    sc = scripted_summary(res)
    for (script, cell), by in sc.items():
        if script == "slowreaders":
            continue  # no req/s: its own table below
        rows.append([f"{script}: {cell.split('-', 1)[1]}"] + [
            f(by[s]["rps"]) if s in by else "n/r" for s in servers]
            + ([""] if fw else []))
    L.append(md_table(hdr, rows))
    if sc:
        L.append("\nrules: and dynamic: rows are the cells of `bench/rules` and "
                 "`bench/dynamic`, run by the same `bench/run` after the others (their "
                 "tables, and why a server sits them out, under *Scripted cells*).")
    if any(s in not_run.get(w["id"], {}) for w in wls for s in servers):
        L.append("\nn/r: not run in that cell (why: under the cell's table).")
    if any(visitors(w) for w in wls):
        L.append("\nIn the visitors cells the clients set the pace (think time), so "
                 "req/s is about equal for every server that keeps up; their "
                 "latencies are the measure (below).")
    if "floor" in servers:
        L.append("\n† floor answers every path with its fixed 1400-byte body, so "
                 "on the bigger files it is not doing the same work.")
    if fw:
        L.append(f"\n*floor workers*: the floor runs {pool} workers (2 × nproc) "
                 "for one request per connection and one worker per connection "
                 "for wrk keep-alive (see Method).")
    L.append("")
    L += p99_section(wls, summ, servers)
    L.append(f"![requests per second]({os.path.relpath(png, os.path.dirname(path))})\n")

    # ---- per workload ----------------------------------------------------
    L.append("## Per workload\n")
    L.append("Columns: req/s and MB/s (10^6 bytes/s; ab and wrk count headers + "
             "body, siege counts bodies only), failed requests (non-2xx, socket "
             "errors, timeouts, requests never completed), latency percentiles "
             "(ab: whole request incl. connect, 1 ms resolution; wrk: `--latency`, "
             "excludes timed-out requests), *max queued*: the most connections "
             "seen waiting in the server's accept queue (Recv-Q of its listening "
             "socket, sampled every 1 s), peak PSS of the server during the cell, "
             "*server CPU*: user + system time of the server's processes per "
             "completed request (the kernel's loopback work lands on whichever side "
             "is running, so part of it is the client's), *client CPU*: the load "
             "tool's user + system time over its run, in % of one core (ab is one "
             "process on one core; siege, a thread per client, and wrk -t2 can use "
             "both: ab near 100% is the limit of its cell, not the server)"
             + (", and pika's req/s divided by that server's (>1 = pika faster)."
                if has_pika else "."))
    L.append("")
    for w in wls:
        L.append(f"### {w['label']}\n")
        if visitors(w):
            L += visitors_table(w, summ, servers, has_pika, not_run.get(w["id"], {}),
                                first=not any(visitors(x) for x in wls[:wls.index(w)]))
            continue
        siege = w["tool"] == "siege"
        cold = bool(w.get("cold"))
        hdr = ["server", "req/s", "MB/s", "failed"]
        hdr += ["mean ms*", "longest ms"] if siege else ["p50 ms", "p99 ms"]
        if cold:
            hdr += ["ready ms", "ab s", "start→done s"]
        hdr += ["max queued", "peak PSS MiB", "server CPU µs/req", "client CPU %", "rounds"]
        if has_pika:
            hdr.append("pika ÷ this")
        pika_rps = summ.get((w["id"], "pika"), {}).get("rps")
        rows = []
        for s in servers:
            x = summ.get((w["id"], s))
            if not x:
                continue
            if x["n"] == 0:
                # blank cells up to "rounds" (0), then the ratio column if any
                tail = ["0"] + ([""] if has_pika else [])
                rows.append([s, "error"] + [""] * (len(hdr) - 2 - len(tail)) + tail)
                continue
            name = s + ("†" if s == "floor" and floor_fake(w) else "") \
                + ("‡" if x.get("ab_aborted") else "")
            row = [name, f(x["rps"]), f(x["mbps"], ".1f"), f(x["failed"])]
            if siege:
                row += [fms(x["avg_ms"]), fms(x["max_ms"])]
            elif w["tool"] == "ab":  # ab reports whole milliseconds
                row += [f(x["p50_ms"]), f(x["p99_ms"])]
            else:
                row += [fms(x["p50_ms"]), fms(x["p99_ms"])]
            if cold:
                row += [f(x["ready_s"] * 1000 if x["ready_s"] is not None else None, ".1f"),
                        f(x["duration_s"], ".2f"), f(x["start_to_done_s"], ".2f")]
            row += [f(x["peak_queue"]),
                    f(x["peak_pss_kb"] / 1024 if x["peak_pss_kb"] else None, ".1f"),
                    f(x["server_us"], ".1f"), f(x["client_pct"]),
                    str(x["n"]) + (f" (+{x['dropped']} busy)" if x["dropped"] else "")]
            if has_pika:
                row.append("—" if s == "pika" else ratio(pika_rps, x["rps"]))
            rows.append(row)
        L.append(md_table(hdr, rows))
        if "floor" in servers and floor_fake(w):
            L.append("\n† floor sends its fixed 1400-byte body here, not "
                     f"`{w['path']}`.")
        if fw.get(w["id"]) is not None and keepalive(w):
            L.append(f"\nfloor ran {f(fw[w['id']])} workers here, one per "
                     f"connection ({pool} everywhere else).")
        aborted = [s for s in servers if summ.get((w["id"], s), {}).get("ab_aborted")]
        if aborted:
            L.append("\n‡ in " + ", ".join(
                f"{summ[(w['id'], s)]['ab_aborted']} of {summ[(w['id'], s)]['n']} round(s)"
                f" for {s}" for s in aborted) +
                " ab gave up because one request got no answer within 10 s "
                "(`-s 10`): the unfinished requests count as failed, req/s is "
                "over wall time (including that wait), no percentiles.")
        if siege:
            L.append("\n\\* siege reports no percentiles: *mean* is mean concurrency ÷ "
                     "transaction rate (Little's law; siege's own figure has 10 ms "
                     "resolution), *longest* is siege's longest transaction.")
        if cold:
            L.append("\n*ready* = spawn until the port first accepted a TCP "
                     "connection; ab starts right then; *start→done* = spawn until "
                     "ab finished (the server is still spawning workers while the "
                     "burst arrives).")
        errs = [f"{s}: {e}" for s in servers
                for e in summ.get((w["id"], s), {}).get("errors", [])]
        if errs:
            L.append("\nErrors: " + "; ".join(sorted(set(errs))))
        L.append("")

    L += scripted_sections(res, sc, servers, has_pika)

    # ---- memory -----------------------------------------------------------
    L.append("## Memory (PSS, MiB, summed over master + all descendants)\n")
    L.append("Idle = after start and a short settle, before any load. Peak = "
             "highest sample (every 1 s) during a cell; per server the largest "
             "per-workload median is shown.\n")
    hdr = ["server", "idle PSS", "idle procs", "peak PSS", "procs at peak",
           "peak during"]
    if has_pika:
        hdr += ["pika idle ÷ this", "pika peak ÷ this"]
    idle = {s: med([i["pss_kb"] for i in res["idle"] if i["server"] == s])
            for s in servers}
    iprocs = {s: med([i["procs"] for i in res["idle"] if i["server"] == s])
              for s in servers}
    peak = {}
    for s in servers:
        best = None
        for w in wls:
            x = summ.get((w["id"], s))
            if x and x.get("peak_pss_kb") and (best is None or x["peak_pss_kb"] > best[0]):
                best = (x["peak_pss_kb"], x["peak_procs"], w["label"])
        peak[s] = best
    rows = []
    for s in servers:
        p = peak[s]
        row = [s, f(idle[s] / 1024 if idle[s] else None, ".1f"), f(iprocs[s]),
               f(p[0] / 1024 if p else None, ".1f"), f(p[1] if p else None),
               p[2] if p else "–"]
        if has_pika:
            row += ["—", "—"] if s == "pika" else [
                ratio(idle.get("pika"), idle[s]),
                ratio(peak["pika"][0] if peak.get("pika") else None,
                      p[0] if p else None)]
        rows.append(row)
    L.append(md_table(hdr, rows, left=1))
    L.append("\nPeak PSS per workload (median across rounds):\n")
    rows = [[w["label"]] + [f(summ.get((w["id"], s), {}).get("peak_pss_kb") / 1024
                              if summ.get((w["id"], s), {}).get("peak_pss_kb") else None,
                              ".1f") for s in servers] for w in wls]
    L.append(md_table(["workload"] + servers, rows))
    L.append("")
    # A worker's own pages: what one more connection or one more worker costs,
    # without the pages a worker shares with the master and its siblings.
    idle_w = {s: med([i.get("worker_private_kb") for i in res["idle"] if i["server"] == s])
              for s in servers}
    if any(v is not None for v in idle_w.values()):
        L.append("A worker's own pages (Private_Clean + Private_Dirty of the largest "
                 "worker, KiB; sampled as PSS is): idle, then the peak during each "
                 "cell (median across rounds).\n")
        rows = [["idle"] + [f(idle_w[s]) for s in servers]]
        rows += [[w["label"]] + [f(summ.get((w["id"], s), {}).get("peak_worker_private_kb"))
                                 for s in servers] for w in wls]
        L.append(md_table(["workload"] + servers, rows))
        L.append("")

    # ---- sanity -----------------------------------------------------------
    any_tls = any(i.get("tls") for i in res["idle"])
    L.append("## Sanity checks\n")
    L.append("Every server instance was asked for each docroot file with the "
             "same `Host: 127.0.0.1:PORT` the load tools send, and the bytes "
             "were compared with the generated files (floor always answers its "
             "fixed 1400-byte body)."
             + (" A server with an HTTPS port was asked (Python's `ssl`, OpenSSL "
                "as wrk and ab) which protocol and cipher a client gets and whether "
                "5 reconnections with the session it had resumed it (wrk's "
                "`Connection: close` cell reconnects so; ab never offers a "
                "session)." if any_tls else "") + "\n")
    rows = []
    for i in res["idle"]:
        v = i.get("verify", {})
        bad = {k: x for k, x in v.items() if not x.startswith("ok")}
        mine = [c for c in res["cells"]
                if c["server"] == i["server"] and c["round"] == i["round"]]
        bz = [busy_pct(c) for c in mine if busy_pct(c) is not None]
        rows.append([i["server"], i["round"], "all ok" if not bad else
                     "; ".join(f"{k}: {x}" for k, x in bad.items()),
                     "no access log" if not meta.get("access_log", {}).get(i["server"], True)
                     else f(i.get("access_log_lines")),
                     f"{statistics.median(bz):.0f}% / {max(bz):.0f}%" if bz else "–"]
                    + ([tls_note(i.get("tls"))] if any_tls else []))
    L.append(md_table(["server", "round", "content check", "access-log lines",
                       "other processes' CPU, median / max"]
                      + (["HTTPS: protocol, cipher, session resumed"] if any_tls else []), rows))
    L[-1] = L[-1].replace("|---:|---:|---:|", "|---:|---|---:|", 1)
    if res.get("errors"):
        L.append("\nServer-level errors:\n")
        for e in res["errors"]:
            L.append(f"- round {e['round']} {e['server']}: `{e['error'][:400]}`")
    L.append("")

    # ---- method ---------------------------------------------------------
    L.append("## Method\n")
    L.append("- Each round runs every workload on every server in turn (A B C …, "
             "then C B A … in the next round) before the next workload, so the "
             "servers' figures for one cell are taken minutes apart at most and slow "
             "drifts of the machine hit all servers alike. Per server and round: a "
             "fresh instance for the cold burst, then another fresh instance that "
             "runs all other workloads in the order listed (the others' instances "
             "stay up, idle, meanwhile).")
    L.append("- All traffic is to 127.0.0.1; load generators run on the same "
             f"{meta['machine']['nproc']}-core machine as the servers, so client "
             "CPU competes with server CPU (absolute numbers are low; ratios are "
             "what matter).")
    L.append("- Shared docroot with deterministic files (same bytes for every "
             "server):")
    for name, x in meta["files"].items():
        L.append(f"  - `{name}`: {x['bytes']} bytes, sha256 `{x['sha256'][:16]}…`")
    L.append("- siege runs with `-R` pointing at a generated rc: "
             "`connection = close`, `protocol = HTTP/1.1`, logging off, "
             "`limit = 1024`, `failures = 1000000` (count failures instead of "
             "aborting), `parser = false`. ab runs with `-r -s 10`; wrk with "
             "`-t2 --timeout 2s --latency`.")
    L.append("- Memory: PSS from `/proc/PID/smaps_rollup`, summed over the master "
             "and every descendant (busybox forks per connection, so its children "
             "count while alive).")
    L.append("- **busybox httpd has no access log** (every other server except the "
             "floor writes one); it also forks a process per connection and does "
             "no keep-alive.")
    if any(s.endswith("-buffered") for s in servers):
        L.append("- **nginx-buffered** and **apache-buffered** are nginx and Apache with "
                 "the same configs but their access log buffered, as production sites "
                 "run them: nginx `access_log … combined buffer=32k flush=1s` (a "
                 "worker writes its records when 32 KB are collected or a second has "
                 "passed), Apache `BufferedLogs On` (a worker writes when its 4 KB "
                 "buffer, PIPE_BUF, cannot take the next record, or when it exits). "
                 "lighttpd needs no such twin: its mod_accesslog buffers by itself and "
                 "writes when 8 KB are collected, on the first record of each new "
                 "second, and every 4 s. pika buffers 8 KiB and flushes every 1 s by "
                 "default (`[[access_log]] buffer`, `flush`).")
    nf = meta.get("nofile")
    if nf:
        L.append(f"- Descriptors: the machine's hard RLIMIT_NOFILE is {nf['hard']} (the "
                 f"harness and its children ran with {nf['soft']}); the configs use "
                 f"{nf['configs']}: nginx `worker_rlimit_nofile {nf['configs']}` and "
                 f"`worker_connections {max(1024, nf['configs'] - 1000)}` per worker, "
                 f"lighttpd `server.max-fds {nf['configs']}` and "
                 f"`server.max-connections {nf['configs'] // 2}` (lighttpd allows at "
                 f"most max-fds / 2), pika `max_open_files = {nf['configs']}`; Apache "
                 "prefork keeps its defaults (256 workers, a connection each).")
    L.append("- **floor** (`bench/floor.c`) answers every request, whatever the "
             "path, with the same 1400-byte body, so its MB/s on the 50 KB / "
             "200 KB / 1.7 MB files is not comparable; its req/s is the ceiling "
             "for a blocking prefork design on this machine. It closes after "
             "responding when the request says `Connection: close` or is "
             "HTTP/1.0 without keep-alive (ab), and has a 5 s idle timeout.")
    if fw:
        ka = sorted({(w["c"], fw[w["id"]]) for w in wls
                     if keepalive(w) and w["id"] in fw})
        L.append(f"- **floor workers**: {pool} (2 × nproc) in the cells with one "
                 "request per connection (siege, ab, wrk with `Connection: close`, "
                 "the cold burst), where a small pool is its best; **one worker per "
                 "connection** in the wrk keep-alive cells ("
                 + ", ".join(f"`-c{c}`: {f(n)}" for c, n in ka) + "). A blocking "
                 "worker holds its keep-alive connection for the whole run, so "
                 f"with {pool} workers the floor served {pool} of the 100 (500) "
                 f"connections while the other {100 - pool} ({500 - pool}) waited "
                 "unanswered in the accept queue, which wrk does "
                 f"not report as errors: its figure was one for {pool} clients, and "
                 "it starved the others. One process per "
                 "connection is the least a prefork server needs to serve every "
                 "keep-alive client; its price is a process wake-up per request.")
    elif "floor" in servers:
        L.append(f"- **floor workers**: {pool} (2 × nproc) in every cell of this "
                 "run (results from before the floor was sized per cell), so in "
                 f"the wrk keep-alive cells it served only {pool} connections and "
                 "the rest waited unanswered (see *max queued*).")
    L.append("- A blocking prefork server (apache prefork, the floor, and pika if "
             "it holds one connection per worker) can serve only as many "
             "keep-alive connections at once as it has workers; the rest wait in "
             "the listen backlog. **wrk does not count those as failures**: wrk "
             "4.1 counts a timeout only when a late answer finally arrives, so a "
             "connection that is never served during the run is invisible in its "
             "output. The *max queued* column shows them (e.g. a prefork server "
             f"with {pool} workers under `wrk -c500` keep-alive leaves "
             f"~{500 - pool} connections unserved for the whole run"
             + ("; the floor avoids this with one worker per connection there)."
                if fw else ")."))
    L.append("")

    # ---- machine / versions / configs ------------------------------------
    mc = meta["machine"]
    L.append("## Machine\n")
    L.append(md_table(["", ""], [
        ["CPU", mc["cpu"]], ["cores (nproc)", mc["nproc"]], ["memory", mc["memory"]],
        ["kernel", mc["kernel"]], ["OS", mc["os"]],
        ["open files limit", mc.get("ulimit_nofile", "?")]] +
        [[k, v] for k, v in mc.get("sysctl", {}).items()], left=2))
    L.append("\n## Versions\n")
    L.append(md_table(["", "version"], [[k, f"`{v}`"] for k, v in meta["versions"].items()
                                        if k not in ORDER or k in servers], left=2))
    L.append("\n## Configurations\n")
    L.append("Generated per instance into a temp dir (TMPDIR; DOCROOT is the "
             "shared docroot); the system's own configs are never used or "
             "changed.\n")
    for s in servers:
        L.append(f"### {s}\n")
        cmd = meta.get("commands", {}).get(s)
        if cmd:
            L.append(f"Command: `{cmd}`\n")
        conf = meta.get("configs", {}).get(s)
        if conf:
            L.append("```\n" + conf.rstrip() + "\n```\n")
        elif s == "busybox":
            L.append("No config file: defaults, command-line only.\n")
    L.append("### siege rc\n")
    L.append("```\n" + meta.get("siegerc", "").rstrip() + "\n```\n")
    with open(path, "w") as fh:
        fh.write("\n".join(L))


def write_png(res, summ, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib not available, no chart", file=sys.stderr)
        return False
    servers = servers_in(res)
    wls = [w for w in res["meta"]["workloads"]
           if any(summ.get((w["id"], s), {}).get("rps") for s in servers)]
    # the scripts' cells with a req/s (rules, dynamic) get a panel each too
    summ = dict(summ)
    for (script, cell), by in scripted_summary(res).items():
        if any(x.get("rps") for x in by.values()):
            wls.append({"id": cell, "label": f"{script}: {cell.split('-', 1)[1]}",
                        "path": "", "tool": script})
            for srv, x in by.items():
                summ[(cell, srv)] = x
    if not wls:
        return False
    cols = 3
    rows = (len(wls) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 5.2, rows * 3.0), squeeze=False)
    for ax, w in zip(axes.flat, wls):
        vals = [summ.get((w["id"], s), {}).get("rps") or 0 for s in servers]
        bars = ax.bar(range(len(servers)), vals,
                      color=[COLORS.get(s, "#999") for s in servers])
        if "floor" in servers and floor_fake(w):
            b = bars[servers.index("floor")]
            b.set_color("#bbbbbb")
            b.set_hatch("//")
            b.set_edgecolor("#333333")
        ax.set_xticks(range(len(servers)))
        ax.set_xticklabels([s + ("*" if s == "floor" and floor_fake(w) else "")
                            for s in servers], fontsize=8)
        ax.set_title(w["label"], fontsize=8.5)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylim(0, max(vals) * 1.18 if max(vals) else 1)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(),
                    f"{v:,.0f}" if v else "n/a", ha="center", va="bottom", fontsize=6.5)
    for ax in list(axes.flat)[len(wls):]:
        ax.axis("off")
    m = res["meta"]
    fig.suptitle(f"requests/s, median of {m['rounds']} round(s) "
                 f"({m['mode']} run, {m['machine']['nproc']} cores, "
                 f"{m['machine']['cpu']})"
                 + ("\nfloor* (hatched) = fixed 1400-byte reply, not the file asked for"
                    if "floor" in servers else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.955))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--md", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--max-busy", type=float, default=25.0, metavar="PCT",
                    help="leave out rounds of a cell measured while other "
                         "processes used more than PCT%% of the CPU, if a "
                         "quieter round exists (default 25; -1 keeps all)")
    a = ap.parse_args()
    res = load(a.results)
    max_busy = None if a.max_busy < 0 else a.max_busy
    summ = summarize(res, max_busy)
    write_png(res, summ, a.png)
    write_md(res, summ, a.md, a.png, max_busy)
    print(f"report.py: wrote {a.md}" + (f" and {a.png}" if os.path.exists(a.png) else ""))


if __name__ == "__main__":
    main()
