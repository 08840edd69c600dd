//! A location that runs CGI scripts (`cgi = true`, `cgi_interpreters`): the script
//! the path names ([`super::script`]), run as a child of the worker with the
//! request's meta-variables and its body on stdin ([`crate::gateway::child`]), its
//! answer read strictly and kept whole for the client, the script reaped at its end
//! (or, with `buffering = false`, sent as it comes: [`crate::gateway::output`]).
//!
//! What goes wrong is said once in the error log with the script's URL path: a
//! script that cannot start (500), an answer that is not one (502), a script past
//! `script_timeout` (killed, 504, or its answer cut once it was begun), one that
//! prints more than [`crate::gateway::output::MAX_OUTPUT`] (killed, likewise).

use crate::gateway::CgiConfig;
use crate::gateway::child::{self, Spawn};
use crate::gateway::output::{self, Fault, MAX_OUTPUT};
use crate::http::response::Reply;

use super::Ask;
use super::script::{self, Scripts};

/// The CGI handler of one location, in one worker.
pub struct Cgi<'c> {
    pub config: &'c CgiConfig,
    pub scripts: Scripts<'c>,
}

impl Cgi<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let Some(p) = self.scripts.prepare(ask, reply) else { return };
        let Some(body) = script::stdin(ask, &p.name, reply) else { return };
        let spec = Spawn {
            script: &p.found.filename,
            interpreter: p.found.script.interpreter.as_deref(),
            env: &p.env,
            limits: self.config.limits,
            timeout: self.config.timeout,
            max_output: MAX_OUTPUT,
            name: &p.name,
            context: &p.context,
        };
        let running = match child::spawn(&spec, body) {
            Ok(r) => r,
            Err(e) => {
                log::error!("{}: could not start {}: {e}", p.name, p.found.filename.display());
                reply.error(500, "The script could not be started.");
                return;
            }
        };
        let keep = self.config.buffering.then_some(ask.link.answers);
        let got = output::read(running, ask.link.socket, ask.link.waiting, keep);
        let name = &p.name;
        match script::answered(got, ask, name, reply) {
            None => {}
            Some(Fault::TimedOut) => {
                log::error!("{name}: killed: still running after script_timeout ({:?})", self.config.timeout);
                reply.error(504, "The script did not answer in time.");
            }
            Some(Fault::TooLong) => {
                log::error!("{name}: killed: its output passed {MAX_OUTPUT} bytes");
                reply.error(502, "The script's answer was too long.");
            }
            Some(Fault::ClientGone) => {
                log::info!("{name}: killed: the client closed the connection");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
            Some(Fault::Broken { why, .. }) => {
                log::error!("{name}: {why}");
                reply.error(502, "The script's answer was not valid.");
            }
        }
    }
}
