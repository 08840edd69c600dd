//! A script's answer as it comes, the same for a CGI script's stdout and a FastCGI
//! application's `FCGI_STDOUT` records: its header block is read first, while the
//! worker waits on the script ([`read`]); what the script printed at once after it
//! is sent with it, whole ([`Got::Whole`], with a `Content-Length`), and an answer
//! still coming is sent as it comes ([`Got::Streaming`], a reader the request cycle
//! sends as `Body::Stream`: chunked to an HTTP/1.1 client unless the script gave a
//! length, until the close to an HTTP/1.0 one).
//!
//! A script is bounded all along, the stream included: past `script_timeout` or
//! [`MAX_OUTPUT`] bytes it is stopped and its answer cut (the client sees a body
//! that does not end well: no last chunk, or a closed connection short of the
//! length), with one line in the error log; a client that hangs up while the script
//! is silent stops it too. Dropping the reader stops the script (a CGI script's
//! group is killed; a FastCGI connection is closed, not kept).

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::answer::{self, AnswerError, Head};

/// The most a script may print, header block included: one that prints without
/// end is stopped here. Streamed answers cost no memory, so this only bounds a
/// runaway (a download of a gigabyte through a script is cut).
pub const MAX_OUTPUT: u64 = 1 << 30;
/// The longest header block a script may print.
pub const MAX_HEAD: usize = 64 * 1024;
/// What is gathered after the header block before the answer is streamed: an
/// answer whole within this much (and at once) is sent with a `Content-Length` in
/// one write, as a file is.
pub const GATHER: usize = 128 * 1024;

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
pub enum Got<S> {
    /// All of it came at once: the head and the body.
    Whole(Head, Vec<u8>),
    /// The head; the body comes as the reader is read.
    Streaming(Head, Streaming<S>),
}

/// Reads `src`'s header block (calling `waiting` once it has kept the worker
/// [`super::WAITING`]), then what follows at once, up to [`GATHER`].
pub fn read<S: Source>(mut src: S, client: BorrowedFd<'_>, waiting: &dyn Fn()) -> Result<Got<S>, Failed> {
    let mut out = Vec::with_capacity(8192);
    let mut ended = false;
    let mut told = Some(Instant::now() + super::WAITING);
    let (head, start) = loop {
        if let Some(found) = answer::parse(&out, MAX_HEAD, ended).map_err(Failed::Answer)? {
            break found;
        }
        let now = Instant::now();
        if told.is_some_and(|at| now >= at) {
            told = None;
            waiting();
        }
        let left = src.deadline().saturating_duration_since(now);
        let wait = told.map_or(left, |at| left.min(at.saturating_duration_since(now)));
        ended = src.step(&mut out, wait, client)?;
    };
    while !ended && out.len() - start < GATHER {
        let before = out.len();
        ended = src.step(&mut out, Duration::ZERO, client)?;
        if out.len() == before && !ended {
            break;
        }
    }
    if ended {
        out.drain(..start);
        return Ok(Got::Whole(head, out));
    }
    // The reader outlives this turn's borrow of the socket: it watches its own copy.
    let client = client.try_clone_to_owned().map_err(|e| Fault::Broken { why: e.to_string(), retry: false })?;
    let left = head.content_length;
    Ok(Got::Streaming(head, Streaming { src, client, pending: out, at: start, ended, left, over: false }))
}

/// The body of a script's answer, read from the script as it is sent.
pub struct Streaming<S> {
    src: S,
    client: OwnedFd,
    /// Output read from the script and not sent yet, from `at`.
    pending: Vec<u8>,
    at: usize,
    ended: bool,
    /// What is left of the length the script gave.
    left: Option<u64>,
    /// The script printed past the length it gave (said once).
    over: bool,
}

impl<S: Source> Read for Streaming<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.pending.len() - self.at;
            if let Some(left) = self.left {
                if left == 0 {
                    // The length the script gave is sent: what more it prints is not
                    // part of the answer.
                    if ready > 0 && !self.over {
                        self.over = true;
                        let why = "it printed more than its Content-Length: the rest was not sent".to_string();
                        self.src.cut(&Fault::Broken { why, retry: false });
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
                    self.src.cut(&Fault::Broken { why, retry: false });
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
                    self.src.cut(&fault);
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
        match read(src, client.as_fd(), &|| {}) {
            Ok(Got::Whole(head, body)) => assert_eq!((head.status, &body[..]), (200, &b"hello"[..])),
            _ => panic!("not whole"),
        }
    }

    #[test]
    fn an_answer_still_coming_is_streamed_from_where_the_head_ends() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"Content-Type: a/b\n\nfirst ", b"second ", b"third"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|| {}) else { panic!("not streamed") };
        assert_eq!(all(&mut body).unwrap(), b"first second third");
    }

    #[test]
    fn a_given_length_bounds_the_stream_and_a_short_one_is_an_error() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"Content-Type: a/b\nContent-Length: 4\n\nab", b"cdEXTRA"], 1);
        let Ok(Got::Streaming(head, mut body)) = read(src, client.as_fd(), &|| {}) else { panic!() };
        assert_eq!(head.content_length, Some(4));
        assert_eq!(all(&mut body).unwrap(), b"abcd");
        let (src, cuts) = pieces(&[b"Content-Type: a/b\nContent-Length: 9\n\nab", b"cd"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|| {}) else { panic!() };
        assert!(all(&mut body).is_err());
        assert_eq!(cuts.get(), 1, "said once in the log");
    }

    #[test]
    fn a_fault_while_streaming_cuts_the_body_and_is_said() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, cuts) = pieces(&[b"Status: 200\n\nsome", b"!"], 1);
        let Ok(Got::Streaming(_, mut body)) = read(src, client.as_fd(), &|| {}) else { panic!() };
        let mut buf = [0u8; 64];
        assert_eq!(body.read(&mut buf).unwrap(), 4);
        assert!(body.read(&mut buf).is_err());
        assert_eq!(cuts.get(), 1);
    }

    #[test]
    fn a_bad_head_is_the_scripts_fault() {
        let (client, _peer) = UnixStream::pair().unwrap();
        let (src, _) = pieces(&[b"garbage\n\n"], 0);
        assert!(matches!(read(src, client.as_fd(), &|| {}), Err(Failed::Answer(_))));
        let (src, _) = pieces(&[b"Content-Type: a/b\n"], 0);
        assert!(matches!(read(src, client.as_fd(), &|| {}), Err(Failed::Answer(AnswerError::Cut))));
    }
}
