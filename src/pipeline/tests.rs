//! The stack with a target that is not an upstream: the gateway's own tools are listed, filtered
//! by roles, refused like unknown names, rate limited, recorded, and answered by their own
//! terminal; calls nested too deep are refused before any policy runs.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ServerResult, Tool};
use tower::ServiceExt;

use arc_swap::ArcSwap;

use super::{CallFuture, CallStack, Op, OwnTool, OwnTools, Parts, hop::MAX_CALL_DEPTH};
use crate::{
    config::load_str,
    pipeline::Call,
    policy::{
        authz::{Role, Roles},
        identity::{Identity, IdentityKind},
        rate_limit::RateLimits,
    },
    stores::idempotency::IdempotencyStore,
    telemetry::metrics::Metrics,
    upstream::{NoDownstreams, pool::Pool},
};

/// Answers with the owner it was routed to and the arguments it got.
#[derive(Debug)]
struct Whoami;

impl OwnTool for Whoami {
    fn definition(&self) -> Tool {
        Tool::new(
            "fedgate.whoami",
            "Tells the caller who it is.",
            Arc::new(serde_json::Map::new()),
        )
    }

    fn call(&self, call: Call) -> CallFuture {
        let owner = call.target.map(|t| t.owner.to_string()).unwrap_or_default();
        let text = format!("{} via {owner}", call.identity.name);
        Box::pin(async move {
            Ok(ServerResult::CallToolResult(CallToolResult::success(vec![
                ContentBlock::text(text),
            ])))
        })
    }
}

/// Answers with the hop path the call carries (`a>b`); exported, so peers see it.
#[derive(Debug)]
struct HopPath;

impl OwnTool for HopPath {
    fn definition(&self) -> Tool {
        let mut tool = Tool::new(
            "fedgate.path",
            "Tells the path of gateways the call passed.",
            Arc::new(serde_json::Map::new()),
        );
        crate::federation::export::mark(&mut tool);
        tool
    }

    fn call(&self, call: Call) -> CallFuture {
        let text = crate::federation::hops::path(&call.meta).join(">");
        Box::pin(async move {
            Ok(ServerResult::CallToolResult(CallToolResult::success(vec![
                ContentBlock::text(text),
            ])))
        })
    }
}

/// A gateway without upstreams whose own tools are `fedgate.whoami` and `fedgate.path`.
struct Gateway {
    pool: Arc<Pool>,
    metrics: Arc<Metrics>,
    parts: Parts,
}

impl Gateway {
    fn stack(&self) -> CallStack {
        super::build(self.parts.clone()).client
    }
}

fn core(extra: &str) -> Gateway {
    let snapshot = load_str("t.toml", extra).expect("valid config");
    let own = OwnTools::new(vec![Arc::new(Whoami), Arc::new(HopPath)]);
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let pool = Pool::new(
        &snapshot,
        metrics.clone(),
        Arc::new(NoDownstreams),
        own.definitions(),
    );
    pool.start();
    let parts = Parts {
        plans: Arc::new(crate::approval::Plans::new(60_000, 16)),
        envelope: crate::envelope::Mode::Errors,
        pool: pool.clone(),
        metrics: metrics.clone(),
        limits: Arc::new(ArcSwap::from_pointee(RateLimits::new(snapshot.rate_limits))),
        idempotency: Arc::new(IdempotencyStore::new(
            snapshot.gateway.idempotency_ttl,
            snapshot.gateway.idempotency_max_bytes,
        )),
        seal: Arc::new(
            rmcp::model::RequestStateCodec::try_new(vec![7; 32]).expect("a 32-byte key"),
        ),
        input_wait: snapshot.gateway.input_wait,
        max_parked_calls: 1,
        audit: None,
        feed: None,
        cluster: Default::default(),
        own,
        gateway_id: snapshot.gateway.id.as_str().into(),
        max_hops: snapshot.gateway.max_hops,
        gate: None,
        credentials: None,
        auth: Arc::new(ArcSwap::from_pointee(
            crate::policy::identity::Authenticator::open(),
        )),
    };
    Gateway {
        pool,
        metrics,
        parts,
    }
}

fn caller(name: &str, tools: &[&str]) -> Identity {
    let mut roles = Roles::default();
    roles.0.insert(
        "r".into(),
        Role {
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            ..Role::default()
        },
    );
    Identity {
        name: name.into(),
        kind: IdentityKind::ApiKey,
        access: Arc::new(roles.access(&["r".to_owned()])),
    }
}

fn call(identity: Identity, tool: &str, depth: u8) -> Call {
    Call::without_session(
        Op::CallTool(CallToolRequestParams::new(tool.to_owned())),
        identity,
        depth,
    )
}

fn text(r: ServerResult) -> String {
    match r {
        ServerResult::CallToolResult(r) => r
            .content
            .first()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default(),
        other => panic!("not a tool result: {other:?}"),
    }
}

/// The plan envelope of a refusal that travelled as a tool result with `isError`.
fn plan(r: Result<ServerResult, rmcp::ErrorData>) -> serde_json::Value {
    match r {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => r
            .meta
            .and_then(|m| m.0.get(crate::envelope::META_KEY).cloned())
            .unwrap_or_default(),
        other => panic!("not a refusal as a tool result: {other:?}"),
    }
}

#[tokio::test]
async fn own_tools_are_listed_and_answered_through_the_whole_stack() {
    let core = core("");
    let catalog = core.pool.catalog();
    assert!(catalog.tool_def("fedgate.whoami").is_some(), "listed");
    let ann = caller("ann", &["fedgate.*"]);
    assert!(crate::pipeline::visible(
        &core.pool,
        &ann.access,
        "fedgate.whoami"
    ));
    let answer = core
        .stack()
        .oneshot(call(ann, "fedgate.whoami", 0))
        .await
        .expect("answered");
    assert_eq!(text(answer), "ann via fedgate");
    let metrics = core.metrics.render();
    assert!(
        metrics.contains("upstream=\"fedgate\"") && metrics.contains("tool=\"fedgate.whoami\""),
        "recorded under its owner: {metrics}"
    );
}

#[tokio::test]
async fn an_own_tool_the_roles_do_not_grant_is_an_unknown_name() {
    let core = core("");
    let bob = caller("bob", &["demo.*"]);
    assert!(!crate::pipeline::visible(
        &core.pool,
        &bob.access,
        "fedgate.whoami"
    ));
    let refused = core
        .stack()
        .oneshot(call(bob, "fedgate.whoami", 0))
        .await
        .expect_err("refused");
    let unknown = core
        .stack()
        .oneshot(call(caller("bob", &["demo.*"]), "fedgate.nothing", 0))
        .await
        .expect_err("unknown");
    assert_eq!(refused.code, unknown.code);
    assert!(
        refused.message.contains("unknown tool `fedgate.whoami`"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn own_tools_are_rate_limited_like_any_other() {
    let core = core("[[rate_limits]]\nby = [\"identity\"]\nper_second = 1\nburst = 1\n");
    let stack = core.stack();
    let ann = || caller("ann", &["fedgate.*"]);
    stack
        .clone()
        .oneshot(call(ann(), "fedgate.whoami", 0))
        .await
        .expect("first");
    let limited = plan(stack.oneshot(call(ann(), "fedgate.whoami", 0)).await);
    assert_eq!(
        (
            limited["status"].as_str(),
            limited["errors"][0]["code"].as_str()
        ),
        (Some("blocked"), Some("rate_limited")),
        "second is over the rate: {limited}"
    );
}

#[tokio::test]
async fn calls_nested_too_deep_are_refused_first() {
    let core = core("");
    let stack = core.stack();
    let ann = || caller("ann", &["fedgate.*"]);
    stack
        .clone()
        .oneshot(call(ann(), "fedgate.whoami", MAX_CALL_DEPTH))
        .await
        .expect("at the limit");
    let deep = plan(
        stack
            .oneshot(call(ann(), "fedgate.whoami", MAX_CALL_DEPTH + 1))
            .await,
    );
    assert_eq!(
        deep["errors"][0]["code"], "too_deep",
        "past the limit: {deep}"
    );
}

/// A call from `who` (a peer gateway when `peer`) that arrives with the hop path `path`.
fn arriving(who: Identity, peer: bool, tool: &str, path: &[&str]) -> Call {
    let who = if peer {
        Identity {
            access: Arc::new((*who.access).clone().as_peer()),
            ..who
        }
    } else {
        who
    };
    let mut c = call(who, tool, 0);
    c.meta.insert(
        crate::federation::hops::PATH_KEY.into(),
        serde_json::json!(path),
    );
    c
}

const GATEWAY_B: &str = "[gateway]\nid = \"gw-b\"\nmax_hops = 3\n";

#[tokio::test]
async fn a_peers_path_grows_by_this_gateway_and_a_clients_path_claims_nothing() {
    let core = core(GATEWAY_B);
    let peer = || caller("gw-a", &["fedgate.*"]);
    let passed = core
        .stack()
        .oneshot(arriving(peer(), true, "fedgate.path", &["gw-a"]))
        .await
        .expect("a peer's call passes");
    assert_eq!(text(passed), "gw-a>gw-b");
    // A client's own path is dropped: it cannot get its calls refused as loops, nor stretch
    // what this gateway passes on.
    let client = core
        .stack()
        .oneshot(arriving(peer(), false, "fedgate.path", &["gw-b", "x", "y"]))
        .await
        .expect("a client's call passes");
    assert_eq!(text(client), "gw-b");
}

#[tokio::test]
async fn loops_and_long_paths_are_refused_before_any_policy() {
    let core = core(GATEWAY_B);
    let peer = || caller("gw-a", &["fedgate.*"]);
    // `fedgate.whoami` is not exported: authz would call it unknown, so the hop guard ran first.
    let looped = plan(
        core.stack()
            .oneshot(arriving(
                peer(),
                true,
                "fedgate.whoami",
                &["gw-a", "gw-b", "gw-c"],
            ))
            .await,
    );
    assert_eq!(looped["errors"][0]["code"], "hop_loop", "{looped}");
    let far = plan(
        core.stack()
            .oneshot(arriving(
                peer(),
                true,
                "fedgate.path",
                &["gw-a", "gw-c", "gw-d"],
            ))
            .await,
    );
    assert_eq!(far["errors"][0]["code"], "hop_limit", "{far}");
    // One gateway fewer is within the limit.
    let near = core
        .stack()
        .oneshot(arriving(peer(), true, "fedgate.path", &["gw-a", "gw-c"]))
        .await
        .expect("within the limit");
    assert_eq!(text(near), "gw-a>gw-c>gw-b");
    // Without a loop the same call meets authz: not exported, so unknown to a peer.
    let unexported = core
        .stack()
        .oneshot(arriving(peer(), true, "fedgate.whoami", &["gw-a"]))
        .await
        .expect_err("refused by authz");
    assert!(
        unexported.message.contains("unknown tool `fedgate.whoami`"),
        "{}",
        unexported.message
    );
}
