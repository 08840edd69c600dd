//! The config as an operator meets it: a minimal file written anywhere starts (the
//! content types are built in), `conf.d` includes, and `pika -T` printing the
//! effective config.

use crate::util::*;

#[test]
fn a_config_without_mime_types_starts_with_the_builtin_table() {
    let site = Site::new();
    std::fs::remove_file(site.path("conf/mime.types")).unwrap();
    site.config("", "");
    site.write("htdocs/site.webmanifest", "{}");
    site.write("htdocs/book.epub", "x");
    site.write("htdocs/a.css", "x");
    let p = Pika::start(&site, "-F");
    for (path, ty) in [
        ("/site.webmanifest", "application/manifest+json"),
        ("/book.epub", "application/epub+zip"),
        ("/a.css", "text/css"),
    ] {
        assert_eq!(get(p.addr, path).header("content-type").as_deref(), Some(ty), "{path}");
    }
}
