//! A CGI script's process, from the spawn to the reaping: the request body written
//! to its stdin while its stdout is read (a script that answers before it has read
//! everything must not deadlock against us), its stderr sent to the error log line
//! by line with its name, and its life bounded.
//!
//! The child gets an environment built from nothing ([`super::env`]), its own
//! process group, the script's directory as its working directory, no descriptor of
//! the worker beyond 0-2, the default action for every signal, CPU and memory
//! rlimits, and it dies with the worker (`sys::spawn_script`: it shares the worker's
//! memory until its exec, as `posix_spawn`'s child does, no copy of page tables for a
//! process that replaces them at once). It is never left
//! behind: past the run-time limit, past the output limit, or when the client hangs
//! up, its whole group is killed; when it exits, whatever it started in its group
//! and left running is killed too (it would hold our pipes); and it is always
//! reaped, so no zombie stays. No command-line argument is ever passed: RFC 3875's
//! "search" query as arguments is how `php-cgi -s` once read a site's source from a
//! URL (CVE-2012-1823).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::output::{Fault, Source, poll_ms};
use crate::base::sys::{self, ScriptLimits};

/// Stderr bytes logged per request: a script that floods its stderr gets one line
/// saying how much more was dropped, not a full disk.
const STDERR_LOGGED: usize = 64 * 1024;
/// The longest stderr line logged whole.
const STDERR_LINE: usize = 8192;
/// Bytes moved per read or write.
const CHUNK: usize = 64 * 1024;
/// Output taken per step: a script that prints faster than the client reads waits
/// on its pipe rather than in the worker's memory.
const STEP_OUTPUT: usize = 4 * CHUNK;

/// What to run.
pub struct Spawn<'a> {
    /// The script's file (absolute).
    pub script: &'a Path,
    /// The program that runs it, for an interpreted script.
    pub interpreter: Option<&'a Path>,
    pub env: &'a [(Vec<u8>, Vec<u8>)],
    pub limits: ScriptLimits,
    /// From the spawn to the end of the output.
    pub timeout: Duration,
    /// The most stdout bytes taken.
    pub max_output: u64,
    /// How the error log names it (its URL path).
    pub name: &'a str,
    /// What its stderr lines say of the request (`, client: …, server: …, request: "…"`).
    pub context: &'a str,
}

/// The request body on the script's stdin (or a FastCGI application's), owned so
/// that it can be fed while the answer streams.
pub enum Stdin {
    Empty,
    Bytes(Vec<u8>),
    /// The first `len` bytes of a file.
    File(File, u64),
}

impl Stdin {
    pub fn len(&self) -> u64 {
        match self {
            Stdin::Empty => 0,
            Stdin::Bytes(b) => b.len() as u64,
            Stdin::File(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes from `at` (a chunk at most) into `buf`.
    pub fn read_at<'b>(&'b self, at: u64, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
        let left = self.len().saturating_sub(at).min(CHUNK as u64) as usize;
        match self {
            Stdin::Empty => Ok(&[]),
            Stdin::Bytes(b) => Ok(&b[at as usize..at as usize + left]),
            Stdin::File(f, _) => {
                buf.resize(left, 0);
                let n = f.read_at(buf, at)?;
                if n == 0 && left > 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(&buf[..n])
            }
        }
    }
}

/// Starts `spec` with `body` to be fed on its stdin.
pub fn spawn(spec: &Spawn<'_>, body: Stdin) -> io::Result<Running> {
    let program = c_string(spec.interpreter.unwrap_or(spec.script).as_os_str().as_bytes())?;
    let script = c_string(spec.script.as_os_str().as_bytes())?;
    let mut argv = vec![program.as_ptr()];
    if spec.interpreter.is_some() {
        argv.push(script.as_ptr());
    }
    argv.push(std::ptr::null());
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(n, v)| c_string(&[n.as_slice(), b"=", v.as_slice()].concat()))
        .collect::<io::Result<_>>()?;
    let mut envp: Vec<_> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let cwd = c_string(spec.script.parent().unwrap_or(Path::new("/")).as_os_str().as_bytes())?;
    // The pipes, close-on-exec on both ends: the child's ends are moved to 0-2.
    let (stdin, child_stdin) = if body.is_empty() {
        (None, OwnedFd::from(File::open("/dev/null")?))
    } else {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        (Some(File::from(w)), r)
    };
    let (stdout, child_stdout) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (stderr, child_stderr) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let exec = sys::ScriptExec {
        program: &program,
        argv: &argv,
        envp: &envp,
        cwd: &cwd,
        stdio: [child_stdin.as_fd(), child_stdout.as_fd(), child_stderr.as_fd()],
        limits: spec.limits,
    };
    let pid = sys::spawn_script(&exec)?;
    drop((child_stdin, child_stdout, child_stderr));
    let exited = match sys::pidfd_open(pid.as_raw() as u32) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = killpg(pid, Signal::SIGKILL);
            let _ = sys::reap(pid);
            return Err(e);
        }
    };
    let (stdout, stderr) = (Some(File::from(stdout)), Some(File::from(stderr)));
    // Ours non-blocking (each end is its own open file: the script's stay blocking).
    for fd in
        [stdin.as_ref().map(|s| s.as_fd()), stdout.as_ref().map(|s| s.as_fd()), stderr.as_ref().map(|s| s.as_fd())]
            .into_iter()
            .flatten()
    {
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
    }
    Ok(Running {
        group: pid,
        exited,
        stdin,
        stdout,
        stderr,
        body,
        sent: 0,
        errors: StderrLines::new(spec.name, spec.context),
        deadline: Instant::now() + spec.timeout,
        timeout: spec.timeout,
        max_output: spec.max_output,
        taken: 0,
        gone: false,
        watch: super::watch::ClientWatch::default(),
        scratch: Vec::new(),
    })
}

/// Adds `fd` to the poll set, if open; its index there.
fn slot<'f>(fd: Option<BorrowedFd<'f>>, fds: &mut Vec<PollFd<'f>>, flags: PollFlags) -> Option<usize> {
    let fd = fd?;
    fds.push(PollFd::new(fd, flags));
    Some(fds.len() - 1)
}

/// A script running: its process, our ends of its pipes, and what moved through
/// them. Dropped, it kills the script's group and reaps it.
pub struct Running {
    /// The script's process, the leader of its group.
    group: Pid,
    /// Readable once the leader has exited (a pidfd).
    exited: OwnedFd,
    stdin: Option<File>,
    stdout: Option<File>,
    stderr: Option<File>,
    body: Stdin,
    /// Body bytes written.
    sent: u64,
    errors: StderrLines,
    deadline: Instant,
    timeout: Duration,
    max_output: u64,
    /// Output bytes read.
    taken: u64,
    /// The leader has exited.
    gone: bool,
    watch: super::watch::ClientWatch,
    scratch: Vec<u8>,
}

impl Source for Running {
    /// One round: the body fed, the output and stderr read, as far as each is
    /// ready. The output ends at its end of file, or once the leader has exited:
    /// all it wrote is in the pipes then (it could not have exited with more than
    /// they hold unread), and a process it left behind may keep them open: what is
    /// there is taken, and no more.
    fn step(&mut self, out: &mut Vec<u8>, wait: Duration, client: BorrowedFd<'_>) -> Result<bool, Fault> {
        if self.stdout.is_none() {
            return Ok(true);
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::TimedOut);
        }
        let mut fds = Vec::with_capacity(5);
        fds.push(PollFd::new(client, self.watch.flags()));
        fds.push(PollFd::new(self.exited.as_fd(), if self.gone { PollFlags::empty() } else { PollFlags::POLLIN }));
        let i_in = slot(self.stdin.as_ref().map(|s| s.as_fd()), &mut fds, PollFlags::POLLOUT);
        let i_out = slot(self.stdout.as_ref().map(|s| s.as_fd()), &mut fds, PollFlags::POLLIN);
        let i_err = slot(self.stderr.as_ref().map(|s| s.as_fd()), &mut fds, PollFlags::POLLIN);
        match poll(&mut fds, poll_ms(wait.min(left))) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Fault::Broken { why: format!("poll: {e}"), retry: false }),
        }
        let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].any().unwrap_or(false));
        let client_ready = fds[0].any().unwrap_or(true);
        let leader_exited = !self.gone && fds[1].any().unwrap_or(false);
        let (w, r, e) = (ready(i_in), ready(i_out), ready(i_err));
        drop(fds);
        if self.watch.gone(client, client_ready) {
            return Err(Fault::ClientGone);
        }
        self.gone |= leader_exited;
        if w {
            self.feed();
        }
        if r {
            self.read_output(out)?;
        }
        if e {
            self.read_errors();
        }
        if self.gone && self.stdout.is_some() && self.read_output(out)? {
            self.read_errors();
            self.stdout = None;
            self.stderr = None;
        }
        Ok(self.stdout.is_none())
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn cut(&mut self, why: &Fault) {
        self.errors.flush();
        let name = self.errors.name();
        match why {
            Fault::TimedOut => {
                log::error!(
                    "{name}: killed: still running after script_timeout ({:?}); its answer was cut",
                    self.timeout
                )
            }
            Fault::TooLong => {
                log::error!("{name}: killed: its output passed {} bytes; its answer was cut", self.max_output)
            }
            Fault::ClientGone => log::info!("{name}: killed: the client closed the connection"),
            Fault::Broken { why, .. } => log::error!("{name}: {why}"),
        }
    }

    fn name(&self) -> &str {
        self.errors.name()
    }
}

impl Running {
    /// Writes what the pipe takes of the body; closes stdin at its end.
    fn feed(&mut self) {
        let Some(pipe) = &mut self.stdin else { return };
        loop {
            let chunk = match self.body.read_at(self.sent, &mut self.scratch) {
                Ok(c) => c,
                Err(e) => {
                    log::error!("{}: reading the request body for the script failed: {e}", self.errors.name());
                    self.stdin = None;
                    return;
                }
            };
            if chunk.is_empty() {
                self.stdin = None;
                return;
            }
            match pipe.write(chunk) {
                Ok(n) => self.sent += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The script stopped reading (EPIPE): the rest of the body is not
                // needed to answer.
                Err(_) => {
                    self.stdin = None;
                    return;
                }
            }
        }
    }

    /// Reads stdout into `out` until it would block or ends (true), or a step's
    /// share is taken (false); past the output limit, a fault.
    fn read_output(&mut self, out: &mut Vec<u8>) -> Result<bool, Fault> {
        let Some(pipe) = &mut self.stdout else { return Ok(true) };
        let start = out.len();
        while out.len() - start < STEP_OUTPUT {
            let len = out.len();
            out.resize(len + CHUNK, 0);
            let got = pipe.read(&mut out[len..]);
            out.truncate(len + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => {
                    self.stdout = None;
                    return Ok(true);
                }
                Ok(n) => {
                    self.taken += n as u64;
                    if self.taken > self.max_output {
                        return Err(Fault::TooLong);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(_) => {
                    self.stdout = None;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn read_errors(&mut self) {
        let Some(pipe) = &mut self.stderr else { return };
        let mut buf = [0u8; 4096];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => {
                    self.stderr = None;
                    self.errors.flush();
                    return;
                }
                Ok(n) => self.errors.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.stderr = None;
                    return;
                }
            }
        }
    }
}

impl Drop for Running {
    /// The script's answer is over (whole, cut, or not wanted): its group goes (the
    /// leader is dead or about to be, and not reaped yet, so its group id is still
    /// ours), its last stderr is logged, and it is reaped.
    fn drop(&mut self) {
        let _ = killpg(self.group, Signal::SIGKILL);
        self.read_errors();
        self.errors.flush();
        let _ = sys::reap(self.group);
    }
}

/// `bytes` as a C string (a NUL inside: refused).
fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a script's path or environment"))
}

/// A script's stderr for the error log, with the script's name and the request
/// (client, server, request line, as nginx says them): what one write of the
/// script holds (PHP writes an error and its stack trace at once) is one line, its
/// inner line breaks escaped; bounded by `STDERR_LOGGED` bytes per request.
pub struct StderrLines {
    name: String,
    context: String,
    partial: Vec<u8>,
    logged: usize,
    dropped: usize,
}

impl StderrLines {
    /// `context` ends each line: `, client: 192.0.2.7, server: example.com,
    /// request: "GET /x.php HTTP/1.1"` ([`request_context`]).
    pub fn new(name: &str, context: &str) -> StderrLines {
        StderrLines { name: name.to_string(), context: context.to_string(), partial: Vec::new(), logged: 0, dropped: 0 }
    }

    /// The script's name, as each line gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What one read of the script's stderr (or one FastCGI record) brought.
    pub fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        match memchr::memrchr(b'\n', &self.partial) {
            Some(nl) => {
                let rest = self.partial.split_off(nl + 1);
                self.line();
                self.partial = rest;
            }
            None if self.partial.len() > STDERR_LINE => self.line(),
            None => {}
        }
    }

    /// A whole message (one FastCGI stderr record): one line, whether or not it
    /// ends with a line break.
    pub fn message(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        self.line();
    }

    fn line(&mut self) {
        let text = std::mem::take(&mut self.partial);
        let text = text.trim_ascii_end();
        if text.is_empty() {
            return;
        }
        if self.logged >= STDERR_LOGGED {
            self.dropped += text.len();
            return;
        }
        self.logged += text.len();
        let mut escaped = Vec::with_capacity(text.len());
        crate::log::format::escape_into(&mut escaped, &text[..text.len().min(STDERR_LINE)]);
        log::error!("{}: {}{}", self.name, String::from_utf8_lossy(&escaped), self.context);
    }

    /// Logs what is left (a last line without a newline, and the count dropped).
    pub fn flush(&mut self) {
        self.line();
        if self.dropped > 0 {
            log::error!("{}: {} more bytes of its stderr were not logged", self.name, self.dropped);
            self.dropped = 0;
        }
    }
}

/// How a script's error-log lines name its request: `, client: ADDR, server: NAME,
/// request: "LINE"` (the line escaped as the access log escapes it).
pub fn request_context(client: std::net::IpAddr, server: &[u8], request_line: &[u8]) -> String {
    let (mut host, mut line) = (Vec::new(), Vec::new());
    crate::log::format::escape_into(&mut host, server);
    crate::log::format::escape_into(&mut line, request_line);
    format!(
        ", client: {client}, server: {}, request: \"{}\"",
        String::from_utf8_lossy(&host),
        String::from_utf8_lossy(&line)
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;

    use super::*;

    fn script(dir: &tempfile::TempDir, body: &str) -> std::path::PathBuf {
        let p = dir.path().join("s.sh");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn spec<'a>(path: &'a Path, env: &'a [(Vec<u8>, Vec<u8>)], timeout_ms: u64) -> Spawn<'a> {
        Spawn {
            script: path,
            interpreter: None,
            env,
            limits: ScriptLimits { cpu_secs: 10, memory: 0 },
            timeout: Duration::from_millis(timeout_ms),
            max_output: 1 << 20,
            name: "/s.sh",
            context: "",
        }
    }

    /// Runs a script to the end of its output, as the handler's reader does. A
    /// script just written can be busy for a moment (`ETXTBSY`: another test's
    /// fork holds the descriptor it was written through until that child's exec),
    /// so that one error is tried again, within a deadline.
    fn run(spec: &Spawn<'_>, body: Stdin, client: BorrowedFd<'_>) -> Result<Vec<u8>, Fault> {
        let copy = |b: &Stdin| match b {
            Stdin::Empty => Stdin::Empty,
            Stdin::Bytes(v) => Stdin::Bytes(v.clone()),
            Stdin::File(f, len) => Stdin::File(f.try_clone().unwrap(), *len),
        };
        let until = Instant::now() + Duration::from_secs(10);
        let mut running = loop {
            match spawn(spec, copy(&body)) {
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32) && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                r => break r.map_err(|e| Fault::Broken { why: e.to_string(), retry: false })?,
            }
        };
        let mut out = Vec::new();
        while !running.step(&mut out, Duration::from_secs(1), client)? {}
        Ok(out)
    }

    fn output(e: Result<Vec<u8>, Fault>) -> String {
        String::from_utf8(e.unwrap()).unwrap()
    }

    #[test]
    fn the_body_goes_in_while_the_output_comes_out() {
        let d = tempfile::tempdir().unwrap();
        // A body larger than a pipe holds, echoed as it is read: neither side waits
        // for the other to finish.
        let p = script(&d, "echo 'Content-Type: text/plain'; echo; cat");
        let body = vec![b'x'; 300_000];
        let (client, _peer) = UnixStream::pair().unwrap();
        let out = output(run(&spec(&p, &[], 20_000), Stdin::Bytes(body.clone()), client.as_fd()));
        assert_eq!(out.len(), "Content-Type: text/plain\n\n".len() + body.len());
    }

    #[test]
    fn the_environment_is_only_what_is_given_and_no_descriptor_leaks() {
        let d = tempfile::tempdir().unwrap();
        let p = script(&d, "env; ls /proc/self/fd");
        let env = [(b"FOO".to_vec(), b"bar".to_vec()), (b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())];
        let (client, _peer) = UnixStream::pair().unwrap();
        let out = output(run(&spec(&p, &env, 20_000), Stdin::Empty, client.as_fd()));
        let vars: Vec<&str> = out.lines().filter(|l| l.contains('=')).collect();
        assert!(vars.contains(&"FOO=bar"), "{out}");
        assert!(!vars.iter().any(|v| v.starts_with("HOME=") || v.starts_with("CARGO")), "{out}");
        // ls's own listing holds 0-2 and the directory it reads (3).
        let fds: Vec<&str> = out.lines().filter(|l| l.bytes().all(|b| b.is_ascii_digit())).collect();
        assert_eq!(fds, ["0", "1", "2", "3"], "{out}");
    }

    #[test]
    fn a_script_past_its_time_is_killed_with_its_group() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("bg.pid");
        let p = script(&d, &format!("sleep 30 & echo $! > {}; sleep 30", pidfile.display()));
        let (client, _peer) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let ended = run(&spec(&p, &[], 300), Stdin::Empty, client.as_fd());
        assert!(matches!(ended, Err(Fault::TimedOut)), "{ended:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
        let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        // The background sleep was in the group: killed (and reaped by init, or a
        // zombie until init reaps it): not running.
        let dead = || {
            let state = std::fs::read_to_string(format!("/proc/{bg}/stat")).unwrap_or_default();
            state.is_empty() || state.contains(") Z")
        };
        let until = Instant::now() + Duration::from_secs(10);
        while !dead() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(dead(), "the background process lives on");
    }

    #[test]
    fn too_much_output_or_a_gone_client_ends_it() {
        let d = tempfile::tempdir().unwrap();
        let p = script(&d, "echo 'Content-Type: a/b'; echo; yes");
        let (client, _peer) = UnixStream::pair().unwrap();
        assert!(matches!(run(&spec(&p, &[], 20_000), Stdin::Empty, client.as_fd()), Err(Fault::TooLong)));
        let p = script(&d, "sleep 30");
        let (client, peer) = UnixStream::pair().unwrap();
        drop(peer);
        let ended = run(&spec(&p, &[], 20_000), Stdin::Empty, client.as_fd());
        assert!(matches!(ended, Err(Fault::ClientGone)), "{ended:?}");
    }

    #[test]
    fn a_script_that_cannot_start_is_told() {
        assert!(spawn(&spec(Path::new("/nonexistent/x.sh"), &[], 1000), Stdin::Empty).is_err());
    }

    #[test]
    fn stderr_is_cut_into_bounded_lines() {
        let mut lines = StderrLines::new("/x", "");
        lines.push(b"one\r\ntwo\nthr");
        assert_eq!(lines.partial, b"thr", "what follows the last line break waits");
        assert_eq!(lines.logged, "one\r\ntwo".len(), "one write, one line");
        lines.message(b"");
        assert!(lines.partial.is_empty());
        lines.push(&vec![b'e'; STDERR_LOGGED * 2]);
        lines.flush();
        assert!(lines.dropped == 0 && lines.logged >= STDERR_LOGGED);
    }
}
