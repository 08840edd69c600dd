//! The decorate stage: what every answer of a vhost gets, whatever answered it
//! (a handler, a redirect, a refusal of the gate): the vhost's own error pages
//! for statuses of 400 and more, and over HTTPS its `Strict-Transport-Security`.
//! Rules that add to every answer of a location (headers, expiry, charset,
//! compression) are applied here too, after the error page is chosen, so they see
//! the body that goes out.

use std::time::SystemTime;

use crate::http::request::Request;
use crate::http::response::Reply;
use crate::rules::Decor;
use crate::site::Site;

/// Decorates `reply`, an answer of `site` (`tls`: over HTTPS) to `req` made at
/// `now`; `decor`: the rules of the location that answered, if one did.
#[inline(always)]
pub(super) fn decorate(
    site: &Site<'_>,
    decor: Option<&Decor>,
    (req, now): (&Request<'_>, SystemTime),
    tls: bool,
    reply: &mut Reply<'_>,
) {
    if reply.status >= 400 {
        site.error_page(reply);
    }
    if let Some(decor) = decor.filter(|d| !d.is_empty()) {
        crate::rules::apply::decorate(decor, req.header("accept-encoding"), reply, now);
    }
    if tls && let Some(hsts) = &site.vhost.hsts {
        reply.header("Strict-Transport-Security", hsts);
    }
}
