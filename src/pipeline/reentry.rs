//! The way back in: a call that waited — for an approval, for its caller's human to connect an
//! account — runs through the whole typed stack from `observe` in when its wait ends, as its
//! caller, one level deeper, so every check decides on it as things stand when it runs and a
//! step added to the stack applies to it without anyone remembering to.

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use tower::ServiceExt;

use super::{Call, CallError, CallFuture, TypedStack, step::done};
use crate::policy::identity::Authenticator;

/// The typed stack, from `observe` in. It is set once the stack is built (the steps that send
/// calls back in are inside the stack they re-enter, so the handle is filled after the fact;
/// a gateway builds its stack once). A call goes back in as its caller is authorized by the
/// config of that moment (`auth`), not as when it first came in.
#[derive(Clone)]
pub struct Reentry {
    stack: Arc<OnceLock<TypedStack>>,
    auth: Arc<ArcSwap<Authenticator>>,
}

impl std::fmt::Debug for Reentry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reentry")
    }
}

impl Reentry {
    pub fn new(auth: Arc<ArcSwap<Authenticator>>) -> Self {
        Self {
            stack: Arc::default(),
            auth,
        }
    }

    pub fn set(&self, stack: TypedStack) {
        let _ = self.stack.set(stack);
    }

    /// Sends `call` in at the top, as its caller may call now. A caller the config no longer
    /// has is refused like a call their roles do not allow.
    pub(super) fn call(&self, mut call: Call) -> CallFuture {
        let Some(stack) = self.stack.get().cloned() else {
            return done(Err(CallError::Internal {
                detail: "a call re-entered before the stack was built".into(),
            }));
        };
        match self.auth.load().current(&call.identity) {
            Some(identity) => call.identity = identity,
            None => {
                return done(Err(CallError::NotAuthorized {
                    shown: Box::new(CallError::Internal {
                        detail: format!("`{}` is no longer configured", call.identity.key()),
                    }),
                }));
            }
        }
        Box::pin(stack.oneshot(call))
    }
}
