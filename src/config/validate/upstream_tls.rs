//! An upstream's `tls` setting, checked once at load.

use super::Ctx;
use crate::config::RawUpstream;

/// `tls` of an http, sse or peer upstream: paths resolved against the config file's folder,
/// and checked once here (a peer must use https with a client certificate: mTLS).
pub(super) fn upstream_tls(
    cx: &mut Ctx<'_>,
    name: &str,
    u: &RawUpstream,
    kind: &str,
) -> Option<crate::config::snapshot::UpstreamTls> {
    let at = u.kind.span().start;
    let https = u
        .url
        .as_ref()
        .is_some_and(|url| url.get_ref().starts_with("https://"));
    let Some(raw) = &u.tls else {
        if kind == "peer" {
            cx.err_at(
                at,
                format!("upstream `{name}`: kind peer needs `tls = {{ ca, cert, key }}` (peers talk mTLS)"),
            );
        }
        return None;
    };
    if kind == "stdio" {
        cx.err_at(
            at,
            format!("upstream `{name}`: `tls` does not apply to kind stdio"),
        );
        return None;
    }
    if !https {
        cx.err_at(
            at,
            format!("upstream `{name}`: `tls` needs an https:// url"),
        );
    }
    if kind == "peer" && (raw.cert.is_none() || raw.key.is_none()) {
        cx.err_at(
            at,
            format!(
                "upstream `{name}`: a peer needs a client certificate: set `tls.cert` and `tls.key`"
            ),
        );
    }
    if raw.cert.is_some() != raw.key.is_some() {
        cx.err_at(
            at,
            format!("upstream `{name}`: `tls.cert` and `tls.key` go together"),
        );
    }
    let base = std::path::Path::new(cx.file)
        .parent()
        .unwrap_or(std::path::Path::new(""))
        .to_path_buf();
    let tls = crate::config::snapshot::UpstreamTls {
        ca: base.join(&raw.ca),
        cert: raw.cert.as_ref().map(|c| base.join(c)),
        key: raw.key.as_ref().map(|k| base.join(k)),
    };
    if let Err(e) = crate::config::tls::client_config(&tls) {
        cx.err_at(at, format!("upstream `{name}`: {e}"));
    }
    Some(tls)
}
