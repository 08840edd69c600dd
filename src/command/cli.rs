//! The command line: what `pika -h` lists, and what each mode does.
//!
//! `-F` runs the master in the foreground, `-X` serves in one process, `-t` checks a
//! config, `-T` checks it and prints it whole, `-k CMD` controls a running server through its pid file (see `ctl`), and
//! plain `pika` starts a daemon.

use std::path::PathBuf;
use std::process::ExitCode;

pub const USAGE: &str = "\
usage: pika [-f FILE] [-F | -X | -t | -T | -k COMMAND | -V | -h]

  -f FILE     configuration file (default: conf/pika.toml)
  -F          run the master in the foreground (systemd, containers, tests)
  -X          serve in a single process, in the foreground (debugging)
  -t          check the configuration and exit (0: valid, 1: invalid)
  -T          check the configuration and print it whole: every key after
              defaults, included files in place
  -k COMMAND  control the server: start, stop, graceful-stop, reload, restart,
              reopen-logs, upgrade, status
  -V          print the version and exit
  -h          print this help and exit

With no mode, pika starts as a daemon (the same as -k start).
Signals to the master: TERM/INT fast stop, QUIT graceful stop, HUP reload,
USR1 reopen logs, USR2 upgrade the binary (a new master takes the listening
sockets over), WINCH stop workers, TTIN/TTOU one more/fewer spare worker.
";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Daemon,
    Foreground,
    Single,
    Test,
    Show,
    Control(String),
    Version,
    Help,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub config: PathBuf,
    pub mode: Mode,
}

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Args, String> {
    let mut config = PathBuf::from("conf/pika.toml");
    let mut mode = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let m = match a.as_str() {
            "-f" => {
                config = it.next().ok_or("-f needs a file")?.into();
                continue;
            }
            "-F" => Mode::Foreground,
            "-X" => Mode::Single,
            "-t" => Mode::Test,
            "-T" => Mode::Show,
            "-V" | "--version" => Mode::Version,
            "-h" | "--help" => Mode::Help,
            "-k" => Mode::Control(it.next().ok_or("-k needs a command")?.clone()),
            other => return Err(format!("unknown argument {other:?}")),
        };
        if mode.replace(m).is_some() {
            return Err("give only one of -F, -X, -t, -T, -k, -V, -h".into());
        }
    }
    Ok(Args { config, mode: mode.unwrap_or(Mode::Daemon) })
}

/// Prints an error the way every failure path of the CLI does.
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("pika: {msg}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Args, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn modes() {
        assert_eq!(p(&[]).unwrap(), Args { config: "conf/pika.toml".into(), mode: Mode::Daemon });
        assert_eq!(p(&["-f", "x.toml", "-F"]).unwrap(), Args { config: "x.toml".into(), mode: Mode::Foreground });
        assert_eq!(p(&["-k", "reload"]).unwrap().mode, Mode::Control("reload".into()));
        assert_eq!(p(&["-T", "-f", "a.toml"]).unwrap(), Args { config: "a.toml".into(), mode: Mode::Show });
        assert!(p(&["-F", "-X"]).is_err());
        assert!(p(&["-f"]).is_err());
        assert!(p(&["--bogus"]).is_err());
    }
}
