//! The `pika` command: parse the arguments, then hand over to the library.

use std::process::ExitCode;

use pika::command::cli::{self, Mode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match cli::parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprint!("pika: {e}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    pika::log::init_stderr(log::LevelFilter::Info);
    // Sockets and pipes passed by an old master or by systemd: read before a daemon
    // forks (LISTEN_PID names this process), and taken out of the environment.
    pika::fork::inherit::capture();
    match args.mode {
        Mode::Help => {
            print!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Mode::Version => {
            println!("pika {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Mode::Test => match pika::config::load(&args.config) {
            Ok(config) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                for e in config.certificate_expiries(now) {
                    if let Some((_, text)) = pika::acme::expiry::warning(&e, now) {
                        eprintln!("pika: warning: {text}");
                    }
                }
                for note in &config.notes {
                    eprintln!("pika: warning: {note}");
                }
                println!("pika: {}: syntax is ok", args.config.display());
                ExitCode::SUCCESS
            }
            Err(e) => cli::fail(e),
        },
        Mode::Show => match pika::config::load(&args.config) {
            Ok(c) => {
                print!("{}", pika::command::show::show(&c));
                ExitCode::SUCCESS
            }
            Err(e) => cli::fail(e),
        },
        Mode::Control(cmd) => pika::command::ctl::run(&cmd, &args.config),
        Mode::Foreground | Mode::Single | Mode::Daemon => {
            let config = match pika::config::load(&args.config) {
                Ok(c) => c,
                Err(e) => {
                    // The old master of an upgrade hears why, too.
                    pika::fork::inherit::report_failure(&e.to_string());
                    return cli::fail(e);
                }
            };
            match args.mode {
                Mode::Foreground => pika::command::daemon::run_foreground(config),
                Mode::Single => pika::command::daemon::run_single(config),
                _ => pika::command::ctl::run("start", &args.config),
            }
        }
    }
}
