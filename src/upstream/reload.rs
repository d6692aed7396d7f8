//! Applying a new snapshot to a running pool: each upstream is kept, updated in place,
//! restarted, started or stopped on its own; the others keep serving and sessions stay open.

use std::sync::Arc;

use serde::Serialize;

use super::{Changed, Upstream, connect::transport_limit, pool::Pool, supervisor};
use crate::config::{Snapshot, UpstreamSpec};

/// What a reload did to the upstreams, by name.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Applied {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Connection settings changed: stopped and started anew.
    pub restarted: Vec<String>,
    /// Only policy changed (tier, tool filters, renames, timeouts, retries, pins): the running
    /// connection is kept.
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
}

/// Whether the change from `old` to `new` needs a new connection (and process). Everything
/// else in a spec is read per call or per catalog build, so it applies in place.
pub fn needs_restart(old: &UpstreamSpec, new: &UpstreamSpec) -> bool {
    // Debug strings compare the whole of each part; they are compared, never printed.
    let connection = |s: &UpstreamSpec| {
        format!(
            "{:?} {:?} {:?} {:?} {:?}",
            s.transport, s.era, s.startup_timeout, s.restart, s.breaker
        )
    };
    let credential_changed = match (&old.credential, &new.credential) {
        (None, None) => false,
        (Some(a), Some(b)) => {
            !a.credential.same_config(&b.credential)
                || a.placement != b.placement
                || a.env_var != b.env_var
        }
        _ => true,
    };
    // The transport's message size limit is set at connect from the tier: a lower tier limit
    // is enforced per call anyway, a higher one needs a transport that lets the bytes through.
    let unlimited = |l: Option<usize>| l.unwrap_or(usize::MAX);
    let limit_raised = unlimited(transport_limit(new)) > unlimited(transport_limit(old));
    credential_changed || limit_raised || connection(old) != connection(new)
}

impl Pool {
    /// Replaces the upstream set with that of `snapshot` (validated already).
    pub fn apply(self: &Arc<Self>, snapshot: &Snapshot) -> Applied {
        let old = self.upstreams();
        let mut applied = Applied::default();
        let mut next = Vec::with_capacity(snapshot.upstreams.len());
        let mut started = Vec::new();
        let mut stopping = Vec::new();
        for spec in &snapshot.upstreams {
            for (tool, fp) in &spec.pins {
                self.pins.preset(&spec.name, tool, fp);
            }
            match old.iter().find(|u| u.name() == spec.name) {
                None => {
                    let up = Arc::new(Upstream::new(spec.clone(), self.stop_child()));
                    applied.added.push(spec.name.clone());
                    started.push(up.clone());
                    next.push(up);
                }
                Some(cur) if needs_restart(&cur.spec(), spec) => {
                    let up = Arc::new(Upstream::new(spec.clone(), self.stop_child()));
                    // Clients' resource subscriptions outlive the restart.
                    up.watched.send_replace(cur.watched.borrow().clone());
                    applied.restarted.push(spec.name.clone());
                    stopping.push(cur.clone());
                    started.push(up.clone());
                    next.push(up);
                }
                Some(cur) => {
                    if format!("{:?}", cur.spec()) == format!("{spec:?}") {
                        applied.unchanged.push(spec.name.clone());
                    } else {
                        applied.updated.push(spec.name.clone());
                    }
                    cur.set_spec(spec.clone());
                    next.push(cur.clone());
                }
            }
        }
        for cur in old.iter() {
            if !snapshot.upstreams.iter().any(|s| s.name == cur.name()) {
                applied.removed.push(cur.name().to_owned());
                let tools: Vec<String> = cur
                    .tool_breakers
                    .states(tokio::time::Instant::now())
                    .into_iter()
                    .map(|(tool, _)| tool)
                    .collect();
                self.metrics().forget_upstream(cur.name(), &tools);
                stopping.push(cur.clone());
            }
        }
        self.upstreams.store(Arc::new(next));
        // Gone from the set first, so no new call is routed to an upstream being stopped.
        self.rebuild(Changed::ALL);
        for up in stopping {
            up.stop();
        }
        for up in started {
            tokio::spawn(supervisor::run(self.clone(), up));
        }
        self.status_changed();
        applied
    }
}
