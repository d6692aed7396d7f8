//! What the steps decided about a call, as one typed record: the tier's classification
//! (`trust`, or the approval step for a call it re-enters), the plan an approved call carries,
//! and the person a per-user call acts as (`connect`). Anyone may read it; only the pipeline's
//! steps write it, each through the one method for its decision.

use std::time::Duration;

use crate::{
    credentials::PersonToken,
    policy::trust::{Approval, CallClass},
};

/// What the tier says of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub class: CallClass,
    /// The tier's deadline for the call.
    pub timeout: Option<Duration>,
    /// Repeating the call cannot do harm: a read, or idempotent by annotation at a tier that
    /// trusts annotations.
    pub retry_safe: bool,
    /// The call must be approved before it runs (tool setting, or the tier's for writes).
    pub approval: Option<Approval>,
}

#[derive(Debug, Clone, Default)]
pub struct Decisions {
    classified: Option<Classified>,
    approved: Option<String>,
    person: Option<PersonToken>,
}

impl Decisions {
    /// The call's class, once classified.
    pub fn class(&self) -> Option<CallClass> {
        self.classified.map(|c| c.class)
    }

    /// How long the call (this attempt of it) may take.
    pub fn timeout(&self) -> Option<Duration> {
        self.classified.and_then(|c| c.timeout)
    }

    pub fn retry_safe(&self) -> bool {
        self.classified.is_some_and(|c| c.retry_safe)
    }

    /// How the call's approval is obtained, when it needs one.
    pub fn approval(&self) -> Option<Approval> {
        self.classified.and_then(|c| c.approval)
    }

    /// The plan whose approval this call runs under.
    pub fn approved(&self) -> Option<&str> {
        self.approved.as_deref()
    }

    /// The caller's own token for a per-user upstream.
    pub fn person(&self) -> Option<&PersonToken> {
        self.person.as_ref()
    }

    /// The tier's classification (`trust`; the approval step for a call it re-enters).
    pub(super) fn classify(&mut self, c: Classified) {
        self.classified = Some(c);
    }

    /// The call runs as approved plan `plan_id`.
    pub(super) fn approve(&mut self, plan_id: String) {
        self.approved = Some(plan_id);
    }

    /// The call acts as its caller's person, with this token (`connect`).
    pub(super) fn act_as(&mut self, person: PersonToken) {
        self.person = Some(person);
    }

    /// What is left of the deadline for one more attempt (`retry`).
    pub(super) fn remaining(&mut self, left: Duration) {
        if let Some(c) = &mut self.classified {
            c.timeout = Some(left);
        }
    }
}
