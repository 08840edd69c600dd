//! A script's answer as it comes, the same for a CGI script's stdout and a FastCGI
//! application's `FCGI_STDOUT` records: its header block is read first, while the
//! worker waits on the script ([`read`]). Then, by default, the whole answer is
//! read as fast as the script prints it and kept ([`super::spool`]: in memory, past
//! 128 KiB in a temporary file), so the script is let go at its end, and the answer
//! is sent whole ([`Got::Whole`], with a `Content-Length`) at the client's pace. A
//! location with `buffering = false` (or an answer past what the spool may take)
//! has it sent as it comes instead: what the script printed at once after its head
//! (up to [`GATHER`]) is sent whole, an answer still coming as it comes
//! ([`Got::Streaming`], a reader the request cycle sends as `Body::Stream`: chunked
//! to an HTTP/1.1 client unless the script gave a length, until the close to an
//! HTTP/1.0 one), the script held until the client has taken it.
//!
//! A script is bounded all along, the stream included: past `script_timeout` or
//! [`MAX_OUTPUT`] bytes it is stopped, before its head is sent (504, 502) or with
//! its answer cut (the client sees a body that does not end well: no last chunk,
//! or a closed connection short of the length), with one line in the error log; a
//! stream waiting for room in its socket is given up at `script_timeout` too
//! (`Streamed::until_ms`). A client that hangs up while the script is silent stops
//! it. Dropping the reader stops the script (a CGI script's group is killed; a
//! FastCGI connection is closed, not kept).

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::answer::{self, AnswerError, Head};
use super::spool::{Kept, Place, Spool};

/// The most a script may print, header block included: one that prints without
/// end is stopped here. Answers cost little memory (kept ones are in files, and
/// past `answer_spool_max` they stream), so this only bounds a runaway (a download
/// of a gigabyte through a script is cut).
pub const MAX_OUTPUT: u64 = 1 << 30;
/// The longest header block a script may print.
pub const MAX_HEAD: usize = 64 * 1024;
/// What is gathered after the header block before an answer not kept is streamed:
/// an answer whole within this much (and at once) is sent with a `Content-Length`
/// in one write, as a file is.
pub const GATHER: usize = super::spool::MEMORY;

/// A running script, as its answer is read.
pub trait Source {
    /// Waits up to `wait` for the script, moves what is ready (the request body in,
    /// its stderr to the error log) and appends its output to `out`; true once its
    /// output has ended. `client` is watched for a hang-up.
    fn step(&mut self, out: &mut Vec<u8>, wait: Duration, client: BorrowedFd<'_>) -> Result<bool, Fault>;
    /// When the script must have answered.
    fn deadline(&self) -> Instant;
    /// Says in the error log why an answer being sent was cut.
    fn cut(&mut self, why: &Fault);
    /// How the error log names it (the script's URL path).
    fn name(&self) -> &str;
}

/// Why a script was stopped before the end of its answer.
#[derive(Debug)]
pub enum Fault {
    /// Past `script_timeout`.
    TimedOut,
    /// Past [`MAX_OUTPUT`].
    TooLong,
    /// The client hung up.
    ClientGone,
    /// The script or the application broke off; `retry`: a kept connection broke
    /// before any answer, and the request may go again on a fresh one (it was not
    /// written, or running it twice does no harm).
    Broken { why: String, retry: bool },
}

/// Why no answer came.
#[derive(Debug)]
pub enum Failed {
    Fault(Fault),
    /// What the script printed is not an answer (502).
    Answer(AnswerError),
}

impl From<Fault> for Failed {
    fn from(f: Fault) -> Failed {
        Failed::Fault(f)
    }
}

/// A script's answer, its header block read.
pub enum Got<S: Source> {
    /// All of it: the head and the body (kept in memory or in a file).
    Whole(Head, Kept),
    /// The head; the body comes as the reader is read.
    Streaming(Head, Streaming<S>),
}

/// The script's wait, as the worker's: every [`super::watch::GLANCE`] it keeps the
/// worker, `waiting` is told for how long so far.
struct Wait<'w> {
    since: Instant,
    glance_at: Instant,
    waiting: &'w dyn Fn(Duration),
}

impl<'w> Wait<'w> {
    fn new(waiting: &'w dyn Fn(Duration)) -> Self {
        let since = Instant::now();
        Wait { since, glance_at: since + super::watch::GLANCE, waiting }
    }

    /// How long the next step may wait for `src`, telling `waiting` when it is time.
    fn next<S: Source>(&mut self, src: &S) -> Duration {
        let now = Instant::now();
        if now >= self.glance_at {
            (self.waiting)(now - self.since);
            self.glance_at = Instant::now() + super::watch::GLANCE;
        }
        let left = src.deadline().saturating_duration_since(now);
        left.min(self.glance_at.saturating_duration_since(now))
    }
}

/// Reads `src`'s header block (telling `waiting` every [`super::watch::GLANCE`] it
/// keeps the worker), then, with a `spool`, the whole answer into it, else what
/// follows at once, up to [`GATHER`].
pub fn read<S: Source>(
    mut src: S,
    client: BorrowedFd<'_>,
    waiting: &dyn Fn(Duration),
    spool: Option<&Place>,
) -> Result<Got<S>, Failed> {
    let mut out = Vec::with_capacity(8192);
    let mut ended = false;
    let mut wait = Wait::new(waiting);
    let (head, start) = loop {
        if let Some(found) = answer::parse(&out, MAX_HEAD, ended).map_err(Failed::Answer)? {
            break found;
        }
        ended = src.step(&mut out, wait.next(&src), client)?;
    };
    out.drain(..start);
    if let Some(place) = spool {
        return keep(src, head, out, ended, client, wait, place);
    }
    while !ended && out.len() < GATHER {
        let before = out.len();
        ended = src.step(&mut out, Duration::ZERO, client)?;
        if out.len() == before && !ended {
            break;
        }
    }
    if ended {
        return Ok(Got::Whole(head, Kept::Memory(out)));
    }
    streaming(src, head, out, None, false, client)
}

/// Reads the rest of `src`'s answer (of which `out` came with its head) into a
/// spool at `place` until it ends: [`Got::Whole`]. Should the spool take no more
/// (its cap, or its file failing: said in the error log), the answer streams from
/// there, what was kept first.
fn keep<S: Source>(
    mut src: S,
    head: Head,
    mut out: Vec<u8>,
    mut ended: bool,
    client: BorrowedFd<'_>,
    mut wait: Wait<'_>,
    place: &Place,
) -> Result<Got<S>, Failed> {
    let mut spool = Spool::new(place);
    loop {
        // An answer within the spool's memory stays in `out` (no copy); past it, what
        // comes goes to the spool's file as it comes.
        if !spool.is_empty() || out.len() > place.memory {
            if let Err(e) = spool.write(&out) {
                log::warn!("{}: {e}: the rest of its answer is sent as it comes", src.name());
                return streaming(src, head, out, Some(spool.finish()), ended, client);
            }
            out.clear();
        }
        if ended {
            let kept = if spool.is_empty() { Kept::Memory(out) } else { spool.finish() };
            return Ok(Got::Whole(head, kept));
        }
        ended = src.step(&mut out, wait.next(&src), client)?;
    }
}

/// The answer as a stream: `kept` first (what a spool took of it), then `pending`
/// (what was read and not kept), then what the script prints (unless it `ended`).
fn streaming<S: Source>(
    src: S,
    head: Head,
    pending: Vec<u8>,
    kept: Option<Kept>,
    ended: bool,
    client: BorrowedFd<'_>,
) -> Result<Got<S>, Failed> {
    // The reader outlives this turn's borrow of the socket: it watches its own copy.
    let client = client.try_clone_to_owned().map_err(|e| Fault::Broken { why: e.to_string(), retry: false })?;
    let left = head.content_length;
    let kept = kept.map(Kept::into_reader);
    let stream = Streaming { src, client, kept, pending, at: 0, ended, left, over: false, said: false };
    Ok(Got::Streaming(head, stream))
}

/// The body of a script's answer, read from the script as it is sent.
pub struct Streaming<S: Source> {
    src: S,
    client: OwnedFd,
    /// The first part of the answer, kept before it streamed: sent first.
    kept: Option<Box<dyn Read>>,
    /// Output read from the script and not sent yet, from `at`.
    pending: Vec<u8>,
    at: usize,
    ended: bool,
    /// What is left of the length the script gave.
    left: Option<u64>,
    /// The script printed past the length it gave (said once).
    over: bool,
    /// Why the answer was cut is said in the error log.
    said: bool,
}

impl<S: Source> Streaming<S> {
    /// When the script must have ended its answer.
    pub fn deadline(&self) -> Instant {
        self.src.deadline()
    }

    fn cut(&mut self, why: &Fault) {
        self.said = true;
        self.src.cut(why);
    }
}

/// A stream given up before its end once the script's time is out (a client that
/// did not take it in time): said in the error log as the script's fault would be.
impl<S: Source> Drop for Streaming<S> {
    fn drop(&mut self) {
        if !self.ended && !self.said && Instant::now() >= self.src.deadline() {
            self.src.cut(&Fault::TimedOut);
        }
    }
}

impl<S: Source> Read for Streaming<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(kept) = &mut self.kept {
            let want = self.left.map_or(buf.len(), |l| buf.len().min(usize::try_from(l).unwrap_or(usize::MAX)));
            let n = if want == 0 { 0 } else { kept.read(&mut buf[..want])? };
            if n > 0 {
                if let Some(left) = &mut self.left {
                    *left -= n as u64;
                }
                return Ok(n);
            }
            self.kept = None;
        }
        loop {
            let mut ready = self.pending.len() - self.at;
            if let Some(left) = self.left {
                if left == 0 {
                    // The length the script gave is sent: what more it prints is not
                    // part of the answer.
                    if ready > 0 && !self.over {
                        self.over = true;
                        let why = "it printed more than its Content-Length: the rest was not sent".to_string();
                        self.cut(&Fault::Broken { why, retry: false });
                    }
                    return Ok(0);
                }
                ready = ready.min(usize::try_from(left).unwrap_or(usize::MAX));
            }
            if ready > 0 {
                let n = ready.min(buf.len());
                buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
                self.at += n;
                if let Some(left) = &mut self.left {
                    *left -= n as u64;
                }
                return Ok(n);
            }
            if self.ended {
                if let Some(left) = self.left {
                    let why = format!("its answer ended {left} bytes short of its Content-Length");
                    self.cut(&Fault::Broken { why, retry: false });
                    return Err(io::Error::other("the script's answer ended short of its length"));
                }
                return Ok(0);
            }
            self.pending.clear();
            self.at = 0;
            let wait = self.src.deadline().saturating_duration_since(Instant::now());
            match self.src.step(&mut self.pending, wait, self.client.as_fd()) {
                Ok(ended) => self.ended = ended,
                Err(fault) => {
                    self.cut(&fault);
                    return Err(io::Error::other("the script's answer was cut"));
                }
            }
        }
    }
}

/// The poll timeout for `wait`: whole milliseconds, rounded up (a wait of a few
/// microseconds is not a busy loop), capped at what `poll` takes.
pub fn poll_ms(wait: Duration) -> nix::poll::PollTimeout {
    let ms = wait.as_micros().div_ceil(1000);
    nix::poll::PollTimeout::from(u16::try_from(ms).unwrap_or(u16::MAX))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::os::unix::net::UnixStream;

    use super::*;

    /// A script that prints these pieces, one per step, then ends.
    struct Pieces {
        left: VecDeque<&'static [u8]>,
        cuts: std::rc::Rc<std::cell::Cell<usize>>,
        /// Steps with nothing before each piece.
        quiet: usize,
        waited: usize,
    }

    impl Source for Pieces {
        fn step(&mut self, out: &mut Vec<u8>, _: Duration, _: BorrowedFd<'_>) -> Result<bool, Fault> {
            if self.waited < self.quiet {
                self.waited += 1;
                return Ok(false);
            }
            self.waited = 0;
            match self.left.pop_front() {
                Some(p) if p == b"!" => Err(Fault::TooLong),
                Some(p) => {
                    out.extend_from_slice(p);
                    Ok(self.left.is_empty())
                }
                None => Ok(true),
            }
        }
        fn deadline(&self) -> Instant {
            Instant::now() + Duration::from_secs(5)
        }
        fn cut(&mut self, _: &Fault) {
            self.cuts.set(self.cuts.get() + 1);
        }
        fn name(&self) -> &str {
            "/pieces"
        }
    }

    fn pieces(p: &[&'static [u8]], quiet: usize) -> (Pieces, std::rc::Rc<std::cell::Cell<usize>>) {
        let cuts = std::rc::Rc::new(std::cell::Cell::new(0));
        (Pieces { left: p.iter().copied().collect(), cuts: cuts.clone(), quiet, waited: 0 }, cuts)
    }

    fn all(r: &mut impl Read) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        r.read_to_end(&mut v).map(|_| v)
    }

    #[test]
    fn an_answer_that_comes_at_once_is_whole() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"Content-Type: a/b\r\n", b"\r\nhel", b"lo"], 0);
        match read(src, client.as_fd(), &|_| {}, None) {
            Ok(Got::Whole(head, Kept::Memory(body))) => assert_eq!((head.status, &body[..]), (200, &b"hello"[..])),
            _ => panic!("not whole"),
        }
    }

    #[test]
    fn an_answer_still_coming_is_streamed_from_where_the_head_ends() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"Content-Type: a/b\n\nfirst ", b"second ", b"third"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|_| {}, None) else { panic!("not streamed") };
        assert_eq!(all(&mut body).unwrap(), b"first second third");
    }

    #[test]
    fn a_given_length_bounds_the_stream_and_a_short_one_is_an_error() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"Content-Type: a/b\nContent-Length: 4\n\nab", b"cdEXTRA"], 1);
        let Ok(Got::Streaming(head, mut body)) = read(src, client.as_fd(), &|_| {}, None) else { panic!() };
        assert_eq!(head.content_length, Some(4));
        assert_eq!(all(&mut body).unwrap(), b"abcd");
        let (src, cuts) = pieces(&[b"Content-Type: a/b\nContent-Length: 9\n\nab", b"cd"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|_| {}, None) else { panic!() };
        assert!(all(&mut body).is_err());
        assert_eq!(cuts.get(), 1, "said once in the log");
    }

    #[test]
    fn a_fault_while_streaming_cuts_the_body_and_is_said() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, cuts) = pieces(&[b"Status: 200\n\nsome", b"!"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|_| {}, None) else { panic!() };
        let mut buf = [0u8; 64];
        assert_eq!(body.read(&mut buf).unwrap(), 4);
        assert!(body.read(&mut buf).is_err());
        assert_eq!(cuts.get(), 1);
    }

    /// A place for answers in a fresh folder: `memory` bytes in memory, `max` in files.
    fn place(memory: usize, max: u64) -> (tempfile::TempDir, super::super::spool::Place) {
        use super::super::spool::{Disk, Place};
        let dir = tempfile::tempdir().unwrap();
        let slots = crate::scoreboard::Scoreboard::new(1).unwrap().slots;
        let place =
            Place::new(dir.path().join("answers"), memory, Disk::answers(&slots[0], slots).capped(u64::MAX, max));
        (dir, place)
    }

    #[test]
    fn a_kept_answer_is_read_to_its_end_however_slowly_it_comes() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (_d, place) = place(4, u64::MAX);
        let (src, _) = pieces(&[b"Content-Type: a/b\n\nfirst ", b"second ", b"third"], 3);
        let Ok(Got::Whole(_, kept)) = read(src, client.as_fd(), &|_| {}, Some(&place)) else { panic!("not whole") };
        assert!(matches!(kept, Kept::File { len: 18, .. }), "past its memory, in a file");
        assert_eq!(all(&mut kept.into_reader()).unwrap(), b"first second third");
        let (src, _) = pieces(&[b"Content-Type: a/b\n\nab", b"c"], 3);
        let Ok(Got::Whole(_, Kept::Memory(v))) = read(src, client.as_fd(), &|_| {}, Some(&place)) else { panic!() };
        assert_eq!(v, b"abc");
    }

    #[test]
    fn an_answer_past_what_the_spool_may_take_streams_from_there() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (_d, place) = place(4, 10);
        let (src, cuts) = pieces(&[b"Content-Type: a/b\nContent-Length: 19\n\nfirst ", b"second ", b"third", b"!!"], 1);
        let Ok(Got::Streaming(head, mut body)) = read(src, client.as_fd(), &|_| {}, Some(&place)) else {
            panic!("not streamed")
        };
        assert_eq!(head.content_length, Some(19));
        assert_eq!(all(&mut body).unwrap(), b"first second third!", "what was kept, then the rest, to its length");
        assert_eq!(cuts.get(), 1, "the extra byte said");
    }

    #[test]
    fn a_bad_head_is_the_scripts_fault() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"garbage\n\n"], 0);
        assert!(matches!(read(src, client.as_fd(), &|_| {}, None), Err(Failed::Answer(_))));
        let (src, _) = pieces(&[b"Content-Type: a/b\n"], 0);
        assert!(matches!(read(src, client.as_fd(), &|_| {}, None), Err(Failed::Answer(AnswerError::Cut))));
    }
}
