//! `[guardrail_hooks.NAME]` checked once: a URL, a bounded timeout, a failure mode, a token
//! that is a reference.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use toml::Spanned;

use super::Ctx;
use crate::{
    config::hooks::RawHook,
    guard::hook::{Hook, Phase},
};

const DEFAULT_TIMEOUT_MS: u64 = 2_000;
const MAX_TIMEOUT_MS: u64 = 60_000;

pub(super) fn validate_hooks(
    cx: &mut Ctx<'_>,
    raw: &BTreeMap<String, Spanned<RawHook>>,
) -> BTreeMap<String, Arc<Hook>> {
    let mut out = BTreeMap::new();
    for (name, h) in raw {
        let at = h.span().start;
        let h = h.get_ref();
        let url = h.url.get_ref();
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || reqwest::Url::parse(url).is_err()
        {
            cx.err_at(
                h.url.span().start,
                format!("guardrail hook `{name}`: url must be an http:// or https:// URL"),
            );
        }
        let timeout_ms = match &h.timeout_ms {
            Some(t) if *t.get_ref() == 0 || *t.get_ref() > MAX_TIMEOUT_MS => {
                cx.err_at(
                    t.span().start,
                    format!("guardrail hook `{name}`: timeout_ms must be 1..={MAX_TIMEOUT_MS}"),
                );
                DEFAULT_TIMEOUT_MS
            }
            Some(t) => *t.get_ref(),
            None => DEFAULT_TIMEOUT_MS,
        };
        let fail_open = match h.failure.as_ref().map(|f| (f.get_ref().as_str(), f)) {
            None | Some(("closed", _)) => false,
            Some(("open", _)) => true,
            Some((other, f)) => {
                cx.err_at(
                    f.span().start,
                    format!("guardrail hook `{name}`: failure `{other}`: use `closed` or `open`"),
                );
                false
            }
        };
        if let Some(t) = &h.token
            && !crate::secret::is_reference(t.get_ref())
        {
            cx.err_at(
                t.span().start,
                format!("guardrail hook `{name}`: token is a reference: `env:NAME` or `file:PATH`"),
            );
        }
        let phases = h
            .phases
            .clone()
            .unwrap_or_else(|| vec![Phase::Request, Phase::Response]);
        if phases.is_empty() {
            cx.err_at(at, format!("guardrail hook `{name}`: phases is empty"));
        }
        out.insert(
            name.clone(),
            Arc::new(Hook {
                name: name.clone(),
                url: url.clone(),
                timeout: Duration::from_millis(timeout_ms),
                fail_open,
                phases,
                token: h.token.as_ref().map(|t| t.get_ref().clone()),
            }),
        );
    }
    out
}
