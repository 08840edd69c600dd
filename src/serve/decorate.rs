//! The decorate stage: what every answer of a vhost gets, whatever answered it
//! (a handler, a redirect, a refusal of the gate): the vhost's own error pages
//! for statuses of 400 and more, and over HTTPS its `Strict-Transport-Security`.
//! Rules that add to every answer of a location (headers, expiry, charset,
//! compression) are applied here too, after the error page is chosen, so they see
//! the body that goes out.

use crate::http::response::Reply;
use crate::site::Site;

/// Decorates `reply`, an answer of `site` (`tls`: over HTTPS).
#[inline(always)]
pub(super) fn decorate(site: &Site<'_>, tls: bool, reply: &mut Reply<'_>) {
    if reply.status >= 400 {
        site.error_page(reply);
    }
    if tls && let Some(hsts) = &site.vhost.hsts {
        reply.header("Strict-Transport-Security", hsts);
    }
}
