//! A CGI script's process, from the spawn to the reaping: the request body written
//! to its stdin while its stdout is read (a script that answers before it has read
//! everything must not deadlock against us), its stderr sent to the error log line
//! by line with its name, and its life bounded.
//!
//! The child gets an environment built from nothing ([`super::env`]), its own
//! process group, the script's directory as its working directory, no descriptor of
//! the worker beyond 0-2, the default action for every signal, CPU and memory
//! rlimits, and it dies with the worker (`sys::prepare_script`). It is never left
//! behind: past the run-time limit, past the output limit, or when the client hangs
//! up, its whole group is killed; when it exits, whatever it started in its group
//! and left running is killed too (it would hold our pipes); and it is always
//! reaped, so no zombie stays. No command-line argument is ever passed: RFC 3875's
//! "search" query as arguments is how `php-cgi -s` once read a site's source from a
//! URL (CVE-2012-1823).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::sys::{self, ScriptLimits};

/// Stderr bytes logged per request: a script that floods its stderr gets one line
/// saying how much more was dropped, not a full disk.
const STDERR_LOGGED: usize = 64 * 1024;
/// The longest stderr line logged whole.
const STDERR_LINE: usize = 8192;
/// Bytes moved per read or write.
const CHUNK: usize = 64 * 1024;

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
    pub max_output: usize,
    /// How the error log names it (its URL path).
    pub name: &'a str,
    /// Called once the script has run [`super::WAITING`].
    pub waiting: &'a dyn Fn(),
}

/// The request body on the script's stdin.
#[derive(Clone, Copy)]
pub enum Stdin<'a> {
    Empty,
    Bytes(&'a [u8]),
    /// The first `len` bytes of a file.
    File(&'a File, u64),
}

impl Stdin<'_> {
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

/// How a run ended.
#[derive(Debug)]
pub enum Ended {
    /// The script closed its output and exited (`output`: all of it).
    Done { output: Vec<u8>, exit: std::process::ExitStatus },
    /// Still running at the time limit: killed (`output`: what came).
    TimedOut { output: Vec<u8> },
    /// More output than `max_output`: killed.
    TooLong,
    /// The client hung up: killed.
    ClientGone,
    /// It could not be started.
    NotStarted(io::Error),
}

/// Runs `spec` with `stdin` as its input; `client` is watched for a hang-up.
pub fn run(spec: &Spawn<'_>, stdin: Stdin<'_>, client: BorrowedFd<'_>) -> Ended {
    let program = spec.interpreter.unwrap_or(spec.script);
    let mut cmd = Command::new(program);
    if spec.interpreter.is_some() {
        cmd.arg(spec.script);
    }
    cmd.env_clear()
        .envs(spec.env.iter().map(|(n, v)| (OsStr::from_bytes(n), OsStr::from_bytes(v))))
        .current_dir(spec.script.parent().unwrap_or(Path::new("/")))
        .stdin(if stdin.is_empty() { Stdio::null() } else { Stdio::piped() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    sys::prepare_script(&mut cmd, spec.limits);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ended::NotStarted(e),
    };
    let group = Pid::from_raw(child.id() as i32);
    let ended = match sys::pidfd_open(child.id()) {
        Ok(exited) => Pipes::new(&mut child, stdin, spec).pump(client, exited.as_fd()),
        Err(e) => Ended::NotStarted(e),
    };
    // The leader is dead or about to be (not reaped yet, so its group id is still
    // ours): whatever it left in its group goes with it.
    let _ = killpg(group, Signal::SIGKILL);
    let exit = child.wait();
    match (ended, exit) {
        (Ended::Done { output, .. }, Ok(exit)) => Ended::Done { output, exit },
        (ended, _) => ended,
    }
}

/// Adds `fd` to the poll set, if open; its index there.
fn slot<'f>(fd: Option<BorrowedFd<'f>>, fds: &mut Vec<PollFd<'f>>, flags: PollFlags) -> Option<usize> {
    let fd = fd?;
    fds.push(PollFd::new(fd, flags));
    Some(fds.len() - 1)
}

/// Our ends of the child's pipes, and what moved through them.
struct Pipes<'a> {
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    body: Stdin<'a>,
    sent: u64,
    output: Vec<u8>,
    errors: StderrLines<'a>,
    spec: &'a Spawn<'a>,
}

impl<'a> Pipes<'a> {
    fn new(child: &mut std::process::Child, body: Stdin<'a>, spec: &'a Spawn<'a>) -> Pipes<'a> {
        let nonblocking = |fd: BorrowedFd<'_>| {
            let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
        };
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        for fd in
            [stdin.as_ref().map(|s| s.as_fd()), stdout.as_ref().map(|s| s.as_fd()), stderr.as_ref().map(|s| s.as_fd())]
                .into_iter()
                .flatten()
        {
            nonblocking(fd);
        }
        Pipes {
            stdin,
            stdout,
            stderr,
            body,
            sent: 0,
            output: Vec::with_capacity(CHUNK),
            errors: StderrLines::new(spec.name),
            spec,
        }
    }

    /// Moves bytes until the script has exited and its output ended, or a limit.
    fn pump(mut self, client: BorrowedFd<'_>, exited: BorrowedFd<'_>) -> Ended {
        let deadline = Instant::now() + self.spec.timeout;
        let mut told = Some(Instant::now() + super::WAITING);
        let mut scratch = Vec::new();
        let mut gone = false;
        let mut watch = super::ClientWatch::default();
        loop {
            if self.stdout.is_none() && self.stderr.is_none() && gone {
                self.errors.flush();
                return Ended::Done { output: self.output, exit: Default::default() };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.errors.flush();
                return Ended::TimedOut { output: self.output };
            }
            if told.is_some_and(|at| Instant::now() >= at) {
                told = None;
                (self.spec.waiting)();
            }
            let wait = told.map_or(left, |at| left.min(at.saturating_duration_since(Instant::now())));
            let ms = u16::try_from(wait.as_millis().max(1)).unwrap_or(u16::MAX);
            let mut fds = Vec::with_capacity(5);
            fds.push(PollFd::new(client, watch.flags()));
            fds.push(PollFd::new(exited, if gone { PollFlags::empty() } else { PollFlags::POLLIN }));
            // Safe to borrow: the pipes live in `self` across the poll.
            let (inp, out, err) = (
                self.stdin.as_ref().map(|s| s.as_fd()),
                self.stdout.as_ref().map(|s| s.as_fd()),
                self.stderr.as_ref().map(|s| s.as_fd()),
            );
            let i_in = slot(inp, &mut fds, PollFlags::POLLOUT);
            let i_out = slot(out, &mut fds, PollFlags::POLLIN);
            let i_err = slot(err, &mut fds, PollFlags::POLLIN);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Ended::NotStarted(e.into()),
            }
            let ready = |i: Option<usize>| i.is_some_and(|i| fds[i].any().unwrap_or(false));
            let client_gone = watch.gone(client, fds[0].any().unwrap_or(true));
            let leader_exited = !gone && fds[1].any().unwrap_or(false);
            let (w, r, e) = (ready(i_in), ready(i_out), ready(i_err));
            drop(fds);
            if client_gone {
                self.errors.flush();
                return Ended::ClientGone;
            }
            gone |= leader_exited;
            if w {
                self.feed(&mut scratch);
            }
            if r && self.read_output() {
                return Ended::TooLong;
            }
            if e {
                self.read_errors();
            }
            if gone {
                // The leader has exited: all it wrote is in the pipes now (it could
                // not have exited with more than they hold unread). A process it left
                // behind may keep them open: what is there is taken, and no more.
                if self.read_output() {
                    return Ended::TooLong;
                }
                self.read_errors();
                self.stdout = None;
                self.stderr = None;
            }
        }
    }

    /// Writes what the pipe takes of the body; closes stdin at its end.
    fn feed(&mut self, scratch: &mut Vec<u8>) {
        let Some(pipe) = &mut self.stdin else { return };
        loop {
            let chunk = match self.body.read_at(self.sent, scratch) {
                Ok(c) => c,
                Err(e) => {
                    log::error!("{}: reading the request body for the script failed: {e}", self.spec.name);
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

    /// Reads stdout until it would block or ends; true past the output limit.
    fn read_output(&mut self) -> bool {
        let Some(pipe) = &mut self.stdout else { return false };
        loop {
            let len = self.output.len();
            self.output.resize(len + CHUNK, 0);
            let got = pipe.read(&mut self.output[len..]);
            self.output.truncate(len + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => {
                    self.stdout = None;
                    return false;
                }
                Ok(_) if self.output.len() > self.spec.max_output => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => {
                    self.stdout = None;
                    return false;
                }
            }
        }
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

/// A script's stderr for the error log, with the script's name: what one write
/// of the script holds (PHP writes an error and its stack trace at once) is one
/// line, its inner line breaks escaped; bounded by `STDERR_LOGGED` bytes per request.
pub struct StderrLines<'a> {
    name: &'a str,
    partial: Vec<u8>,
    logged: usize,
    dropped: usize,
}

impl<'a> StderrLines<'a> {
    pub fn new(name: &'a str) -> StderrLines<'a> {
        StderrLines { name, partial: Vec::new(), logged: 0, dropped: 0 }
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
        log::error!("{}: {}", self.name, String::from_utf8_lossy(&escaped));
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

    fn spawn<'a>(path: &'a Path, env: &'a [(Vec<u8>, Vec<u8>)], timeout_ms: u64) -> Spawn<'a> {
        Spawn {
            script: path,
            interpreter: None,
            env,
            limits: ScriptLimits { cpu_secs: 10, memory: 0 },
            timeout: Duration::from_millis(timeout_ms),
            max_output: 1 << 20,
            name: "/s.sh",
            waiting: &|| {},
        }
    }

    fn output(e: Ended) -> String {
        match e {
            Ended::Done { output, .. } => String::from_utf8(output).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_body_goes_in_while_the_output_comes_out() {
        let d = tempfile::tempdir().unwrap();
        // A body larger than a pipe holds, echoed as it is read: neither side waits
        // for the other to finish.
        let p = script(&d, "echo 'Content-Type: text/plain'; echo; cat");
        let body = vec![b'x'; 300_000];
        let (client, _peer) = UnixStream::pair().unwrap();
        let out = output(run(&spawn(&p, &[], 20_000), Stdin::Bytes(&body), client.as_fd()));
        assert_eq!(out.len(), "Content-Type: text/plain\n\n".len() + body.len());
    }

    #[test]
    fn the_environment_is_only_what_is_given_and_no_descriptor_leaks() {
        let d = tempfile::tempdir().unwrap();
        let p = script(&d, "env; ls /proc/self/fd");
        let env = [(b"FOO".to_vec(), b"bar".to_vec()), (b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())];
        let (client, _peer) = UnixStream::pair().unwrap();
        let out = output(run(&spawn(&p, &env, 20_000), Stdin::Empty, client.as_fd()));
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
        let ended = run(&spawn(&p, &[], 300), Stdin::Empty, client.as_fd());
        assert!(matches!(ended, Ended::TimedOut { .. }), "{ended:?}");
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
        assert!(matches!(run(&spawn(&p, &[], 20_000), Stdin::Empty, client.as_fd()), Ended::TooLong));
        let p = script(&d, "sleep 30");
        let (client, peer) = UnixStream::pair().unwrap();
        drop(peer);
        let ended = run(&spawn(&p, &[], 20_000), Stdin::Empty, client.as_fd());
        assert!(matches!(ended, Ended::ClientGone), "{ended:?}");
    }

    #[test]
    fn a_script_that_cannot_start_is_told() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let ended = run(&spawn(Path::new("/nonexistent/x.sh"), &[], 1000), Stdin::Empty, client.as_fd());
        assert!(matches!(ended, Ended::NotStarted(_)), "{ended:?}");
    }

    #[test]
    fn stderr_is_cut_into_bounded_lines() {
        let mut lines = StderrLines::new("/x");
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
