//! Handshake-era sessions that survive a request landing on another replica (F3 scale-out),
//! without a shared store: the `Mcp-Session-Id` a client sees is sealed session state.
//!
//! rmcp keeps sessions in memory and can restore one from a `SessionStore` by replaying its
//! `initialize`; the edge holds plain sessions itself (`transport::handshake`) and restores them from
//! the same store. fedgate's store holds nothing for long: when a new session is stored (by
//! rmcp or the edge), the HTTP edge seals (HMAC, `[gateway] state_key`) the session's internal
//! id, its `initialize` parameters, the caller it belongs to and the time, and hands that out
//! as the session id. On every request the edge opens the sealed id, checks caller and age, and gives
//! rmcp the internal id; on a replica that does not know the session, the store answers
//! rmcp's restore lookup with the parameters the client just presented.
//!
//! What is restored is what `initialize` carried (protocol version, client capabilities and
//! info). Not restored: a `logging/setLevel` level, resource subscriptions, a standalone GET
//! stream (the client reopens it) and requests in flight on the other replica. A DELETE ends
//! the session for good on the replica that receives it (its id is refused there from then
//! on); another replica still holding or restoring a copy ends it after `session_idle_ms`.
//! Every replica needs the same `state_key`.
//!
//! Opening a sealed id (base64, HMAC, JSON) is the costliest step of a small call, and a client
//! presents the same id on every request: ids verified once are remembered (bounded), so a
//! repeat costs one map lookup. The caller and the age are still checked on every request.

use std::{sync::Arc, time::Duration};

use dashmap::DashMap;
use rmcp::{
    model::{InitializeRequestParams, RequestStateCodec},
    transport::streamable_http_server::session::store::{
        SessionState, SessionStore, SessionStoreError,
    },
};
use serde::{Deserialize, Serialize};

use crate::clock::now_ms;

/// How long a transient entry may outlive its request before it is dropped.
const TRANSIENT_FOR: Duration = Duration::from_secs(60);

/// How many ended sessions (or transient entries) accumulate between prunings.
const PRUNE_EVERY: usize = 1024;

/// Most verified ids remembered; past it the memory starts over (ids are verified again).
const VERIFIED_MAX: usize = 4096;

/// Most ended sessions remembered (about 100 bytes each); past it the oldest half is forgotten,
/// so churn cannot grow memory for the ticket lifetime (a forgotten id's owner could restore a
/// session it ended itself, nothing more).
const ENDED_MAX: usize = 100_000;

/// The longest client name and version kept in a sealed session id.
const SEALED_NAME_CHARS: usize = 64;

fn cut(s: &mut String, max: usize) {
    if let Some((i, _)) = s.char_indices().nth(max) {
        s.truncate(i);
    }
}

/// Associated data of sealed session ids, so no other sealed value passes for one.
const SESSION_AD: &[u8] = b"fedgate-session";

#[derive(Debug, Serialize, Deserialize)]
struct Ticket {
    /// rmcp's id of the session.
    sid: String,
    /// Whose session it is (the authenticated identity).
    who: String,
    /// Unix milliseconds when it was issued.
    issued: u64,
    /// The `initialize` parameters as JSON text: parsed only when a replica restores the
    /// session, not on every request.
    init: String,
}

/// A sealed id that passed verification on this replica.
#[derive(Debug)]
struct Verified {
    sid: String,
    who: String,
    issued: u64,
}

/// rmcp's session store, backed by what clients present (see the module doc).
#[derive(Debug)]
pub struct SealedSessions {
    seal: Arc<RequestStateCodec>,
    ttl: Duration,
    /// Sessions just created (until their id is sealed) or being restored (for the length
    /// of the request that restores them).
    /// With the time of insertion, so entries of requests that never finished (the client
    /// went away mid-`initialize`) are dropped eventually.
    transient: DashMap<String, (Arc<str>, u64)>,
    /// Sessions ended here by a DELETE, with the time: never restored again on this replica.
    ended: DashMap<String, u64>,
    /// Sealed id -> what it says, for ids verified before.
    verified: DashMap<Arc<str>, Arc<Verified>>,
    /// rmcp's id -> the `initialize` parameters of sessions whose ids were verified here, so
    /// rmcp can restore a session it does not know.
    restorable: DashMap<String, Arc<str>>,
}

impl SealedSessions {
    pub fn new(seal: Arc<RequestStateCodec>, ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            seal,
            ttl,
            transient: DashMap::new(),
            ended: DashMap::new(),
            verified: DashMap::new(),
            restorable: DashMap::new(),
        })
    }

    /// The id a client gets for the session rmcp just created as `sid`, if rmcp persisted it.
    pub fn seal_new(&self, sid: &str, who: &str) -> Option<String> {
        let (_, (init, _)) = self.transient.remove(sid)?;
        let ticket = Ticket {
            sid: sid.to_owned(),
            who: who.to_owned(),
            issued: now_ms(),
            init: init.to_string(),
        };
        self.seal
            .seal_json_with(
                &ticket,
                &rmcp::model::SealOptions::new().associated_data(SESSION_AD),
            )
            .ok()
    }

    /// rmcp's id behind a sealed id presented by `who`; `None` for anything forged, expired,
    /// ended or presented by someone else. The session can then be restored on this replica.
    pub fn open(&self, sealed: &str, who: &str) -> Option<String> {
        let known = self.verified.get(sealed).map(|v| v.clone());
        let v = match known {
            Some(v) => v,
            None => {
                let ticket: Ticket = self.seal.open_json_with(sealed, SESSION_AD).ok()?;
                let v = Arc::new(Verified {
                    sid: ticket.sid,
                    who: ticket.who,
                    issued: ticket.issued,
                });
                if self.verified.len() >= VERIFIED_MAX {
                    self.verified.clear();
                    self.restorable.clear();
                }
                self.restorable
                    .insert(v.sid.clone(), Arc::from(ticket.init));
                self.verified.insert(Arc::from(sealed), v.clone());
                v
            }
        };
        let fresh = v.issued.saturating_add(self.ttl.as_millis() as u64) >= now_ms();
        if v.who != who || !fresh || self.ended.contains_key(&v.sid) {
            return None;
        }
        Some(v.sid.clone())
    }

    fn remember(&self, sid: String, init: Arc<str>) {
        let now = now_ms();
        if self.transient.len() % PRUNE_EVERY == PRUNE_EVERY - 1 {
            let horizon = now.saturating_sub(TRANSIENT_FOR.as_millis() as u64);
            self.transient.retain(|_, (_, at)| *at >= horizon);
        }
        self.transient.insert(sid, (init, now));
    }
}

/// rmcp's side: it stores a new session's state, loads it to restore an unknown session, and
/// deletes it when the client ends the session.
#[async_trait::async_trait]
impl SessionStore for SealedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let known = self.transient.get(session_id).map(|s| s.0.clone());
        let Some(init) = known.or_else(|| self.restorable.get(session_id).map(|s| s.clone()))
        else {
            return Ok(None);
        };
        let params: InitializeRequestParams = serde_json::from_str(&init)?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        // The session id is a header: only what a restored session needs is sealed. Display
        // data (icons as data URIs, title, description, website) and `_meta` are dropped, name
        // and version are cut (the edge already refused oversized `initialize` bodies).
        let mut params = state.initialize_params.clone();
        params.meta = None;
        let info = &mut params.client_info;
        info.icons = None;
        info.title = None;
        info.description = None;
        info.website_url = None;
        cut(&mut info.name, SEALED_NAME_CHARS);
        cut(&mut info.version, SEALED_NAME_CHARS);
        let init = serde_json::to_string(&params)?;
        self.remember(session_id.to_owned(), Arc::from(init));
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.transient.remove(session_id);
        self.restorable.remove(session_id);
        let now = now_ms();
        // Entries older than the ticket lifetime cannot matter (such tickets are refused);
        // dropped now and then, not on every DELETE.
        if self.ended.len() % PRUNE_EVERY == PRUNE_EVERY - 1 {
            let horizon = now.saturating_sub(self.ttl.as_millis() as u64);
            self.ended.retain(|_, at| *at >= horizon);
            if self.ended.len() > ENDED_MAX {
                let mut times: Vec<u64> = self.ended.iter().map(|e| *e.value()).collect();
                let half = times.len() / 2;
                let (_, cutoff, _) = times.select_nth_unstable(half);
                let cutoff = *cutoff;
                self.ended.retain(|_, at| *at > cutoff);
            }
        }
        self.ended.insert(session_id.to_owned(), now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(key: u8) -> Arc<SealedSessions> {
        SealedSessions::new(
            Arc::new(RequestStateCodec::try_new(vec![key; 32]).unwrap()),
            Duration::from_secs(3600),
        )
    }

    fn init() -> SessionState {
        serde_json::from_value(serde_json::json!({"initialize_params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}
        }}))
        .unwrap()
    }

    #[tokio::test]
    async fn ended_sessions_are_bounded_under_churn() {
        let s = sessions(3);
        for i in 0..(ENDED_MAX + 4 * PRUNE_EVERY) {
            s.delete(&format!("session-{i}")).await.unwrap();
        }
        assert!(s.ended.len() <= ENDED_MAX, "{}", s.ended.len());
        // The newest stay refused.
        let last = format!("session-{}", ENDED_MAX + 4 * PRUNE_EVERY - 1);
        assert!(s.ended.contains_key(&last));
    }

    #[tokio::test]
    async fn a_sealed_id_restores_its_session_on_another_replica_for_its_owner_only() {
        let a = sessions(1);
        a.store("sid-1", &init()).await.unwrap();
        let sealed = a.seal_new("sid-1", "ann").unwrap();
        assert!(
            a.load("sid-1").await.unwrap().is_none(),
            "nothing kept once sealed"
        );
        let b = sessions(1);
        assert_eq!(b.open(&sealed, "bob"), None, "another caller");
        assert_eq!(b.open(&sealed, "ann").as_deref(), Some("sid-1"));
        let state = b.load("sid-1").await.unwrap().expect("restorable");
        assert_eq!(state.initialize_params.client_info.name, "t");
        // A repeat is answered from what was verified, still for its owner only.
        assert_eq!(b.open(&sealed, "ann").as_deref(), Some("sid-1"));
        assert_eq!(
            b.open(&sealed, "bob"),
            None,
            "another caller, remembered id"
        );
        // Ended here: refused from then on, and nothing left to restore.
        b.delete("sid-1").await.unwrap();
        assert_eq!(b.open(&sealed, "ann"), None);
        assert!(b.load("sid-1").await.unwrap().is_none());
        // Another key, or an edited id.
        assert_eq!(sessions(2).open(&sealed, "ann"), None);
        let mut edited = sealed.into_bytes();
        let i = edited.len() - 4;
        edited[i] = if edited[i] == b'A' { b'B' } else { b'A' };
        assert_eq!(b.open(&String::from_utf8(edited).unwrap(), "ann"), None);
    }
}
