//! Per-user credential metrics: what happened to people's credentials, by upstream and event.
//! Labels are configured upstream names and fixed words; never a person or a token.

use prometheus::{IntCounterVec, Opts, Registry};

#[derive(Debug, Clone)]
pub struct CredentialMetrics {
    /// `upstream`, `event`: `asked` (a person was sent to the connect page), `connected`,
    /// `revoked`, `rejected` (the upstream refused a person's credential), `refused` (a bad
    /// page submission: forged, used or expired state, malformed token; a sign-in the
    /// authorization server ended with an error), `callback_refused` (of those, the
    /// authorization server's callback), `refreshed`, `refresh_failed` (an OAuth refresh,
    /// whether the grant was gone or the server did not answer), `failed` (the store, or an
    /// authorization server that did not answer a code exchange).
    pub events: IntCounterVec,
}

impl CredentialMetrics {
    pub(crate) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let events = IntCounterVec::new(
            Opts::new(
                "fedgate_user_credentials_total",
                "Per-user upstream credentials: asked, connected, revoked, rejected, refused, callback_refused, refreshed, refresh_failed, failed",
            ),
            &["upstream", "event"],
        )?;
        registry.register(Box::new(events.clone()))?;
        Ok(Self { events })
    }

    pub fn count(&self, upstream: &str, event: &str) {
        self.events.with_label_values(&[upstream, event]).inc();
    }
}
