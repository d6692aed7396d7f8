//! `[[rate_limits]]`: keys, scope and rates of each rule.

use std::num::NonZeroU32;

use toml::Spanned;

use super::Ctx;
use crate::{
    config::RawRateLimit,
    policy::rate_limit::{KeyBy, RuleSpec},
};

pub(super) fn validate_rate_limits(
    cx: &mut Ctx<'_>,
    raw: &[Spanned<RawRateLimit>],
    upstreams: &[String],
) -> Vec<RuleSpec> {
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let at = r.span().start;
        let r = r.get_ref();
        let mut by = KeyBy::default();
        for part in &r.by {
            match part.get_ref().as_str() {
                "identity" => by.identity = true,
                "upstream" => by.upstream = true,
                "tool" => by.tool = true,
                other => cx.err_at(
                    part.span().start,
                    format!("rate limit key `{other}` is not one of identity, upstream, tool"),
                ),
            }
        }
        if let Some(u) = &r.upstream
            && !upstreams.contains(u.get_ref())
        {
            cx.err_at(
                u.span().start,
                format!("rate limit names unknown upstream `{}`", u.get_ref()),
            );
        }
        let Some(per_second) = NonZeroU32::new(r.per_second) else {
            cx.err_at(at, "rate limit per_second must be greater than 0".into());
            continue;
        };
        let burst = r.burst.and_then(NonZeroU32::new).unwrap_or(per_second);
        out.push(RuleSpec {
            name: r
                .name
                .clone()
                .unwrap_or_else(|| format!("rate_limits[{i}]")),
            by,
            upstream: r.upstream.as_ref().map(|u| u.get_ref().clone()),
            per_second,
            burst,
        });
    }
    out
}
