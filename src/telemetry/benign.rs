//! rmcp logs some ordinary events at ERROR: a stateless-era request whose client has gone by the
//! time rmcp drains the request's service ("failed to send pending response during drain": every
//! `subscriptions/listen` the client closes, as that era ends subscriptions). Nothing there for
//! an operator to act on, so these events are dropped from fedgate's log; everything else of
//! rmcp's keeps its level.

use std::fmt;

use tracing::{Event, Metadata, field::Field};
use tracing_subscriber::layer::{Context, Filter};

/// Messages of rmcp's service that report a peer gone mid-drain.
const BENIGN: [&str; 2] = [
    "failed to send pending response during drain",
    "fail to response message",
];

pub struct Benign;

impl<S> Filter<S> for Benign {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        let meta = event.metadata();
        if meta.target() != "rmcp::service" {
            return true;
        }
        let mut message = Message(None);
        event.record(&mut message);
        !message.0.is_some_and(|m| BENIGN.iter().any(|b| m == *b))
    }
}

struct Message(Option<String>);

impl tracing::field::Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}
