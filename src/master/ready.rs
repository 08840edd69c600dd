//! How the master reports its start to the command that launched it as a daemon
//! (`pika -k start`): one line on a pipe, `ok` once the listeners are bound and the
//! first workers serve, or the reason it could not start. The command exits 0 only
//! on `ok`.

use std::fs::File;
use std::io::{Read, Write};

/// The master's end of the pipe (nothing to tell in the foreground).
pub struct Ready(Option<File>);

impl Ready {
    /// `pipe`: the write end, for a daemon; None in the foreground.
    pub fn new(pipe: Option<File>) -> Ready {
        Ready(pipe)
    }

    /// The server is serving.
    pub fn ok(&mut self) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(b"ok\n");
        }
    }

    /// The server could not start, because of `msg`.
    pub fn fail(&mut self, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(format!("{msg}\n").as_bytes());
        }
    }

    /// Nothing told yet.
    pub fn pending(&self) -> bool {
        self.0.is_some()
    }
}

/// The launching command's side: waits for the line and returns how the start went.
/// Reads one line, not to EOF: the workers inherit the write end, and they outlive
/// the command.
pub fn wait(pipe: File) -> Result<(), String> {
    let mut msg = Vec::new();
    let mut byte = [0u8; 1];
    let mut f = pipe;
    while let Ok(1) = f.read(&mut byte) {
        if byte[0] == b'\n' {
            break;
        }
        msg.push(byte[0]);
    }
    match String::from_utf8_lossy(&msg).trim() {
        "ok" => Ok(()),
        "" => Err("the server exited before it was ready (see the error log)".to_string()),
        m => Err(m.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(say: impl FnOnce(&mut Ready)) -> Result<(), String> {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut ready = Ready::new(Some(File::from(w)));
        say(&mut ready);
        assert!(!ready.pending());
        drop(ready);
        wait(File::from(r))
    }

    #[test]
    fn one_line_says_how_the_start_went() {
        assert_eq!(told(|r| r.ok()), Ok(()));
        assert_eq!(
            told(|r| r.fail("cannot listen on 127.0.0.1:80: in use")),
            Err("cannot listen on 127.0.0.1:80: in use".into())
        );
        assert!(told(|r| drop(r.0.take())).unwrap_err().contains("exited before it was ready"));
        let mut quiet = Ready::new(None);
        quiet.ok();
        assert!(!quiet.pending());
    }
}
