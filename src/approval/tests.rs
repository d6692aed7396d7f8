use super::*;
use serde_json::{Value, json};

use crate::approval::events::PlanEvent;

fn new_plan(approvers: &[&str]) -> NewPlan {
    NewPlan {
        caller: "api_key:alice".into(),
        upstream: "notes".into(),
        tool: "notes.save".into(),
        upstream_tool: "write_note".into(),
        arguments: json!({"key": "k", "value": "v"})
            .as_object()
            .cloned()
            .unwrap(),
        summary: "key=\"k\", value=\"v\"".into(),
        idempotency_key: None,
        policy_version: "v1".into(),
        safety: Default::default(),
        approvers: approvers.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_self_approved_plan_runs_once_for_its_caller_only() {
    let plans = Plans::new(60_000, 8);
    let plan = plans.create(new_plan(&[])).unwrap();
    assert_eq!(
        plans.take(&plan.id, "api_key:mallory", |_| true).err(),
        Some(PlanRefusal::Unknown)
    );
    let taken = plans.take(&plan.id, "api_key:alice", |_| true).unwrap();
    assert_eq!(taken.arguments["value"], "v");
    assert_eq!(
        plans.take(&plan.id, "api_key:alice", |_| true).err(),
        Some(PlanRefusal::Used)
    );
    assert!(plans.running(&plan.id, "api_key:alice").is_ok());
    assert_eq!(
        plans.running(&plan.id, "api_key:mallory").err(),
        Some(PlanRefusal::Unknown)
    );
    plans.restore(&plan.id);
    assert!(
        plans.take(&plan.id, "api_key:alice", |_| true).is_ok(),
        "a restored plan runs again"
    );
    assert_eq!(plans.count_pending(), 0);
}

#[test]
fn reviewers_decide_and_changed_policy_invalidates() {
    let plans = Plans::new(60_000, 8);
    let plan = plans.create(new_plan(&["reviewer"])).unwrap();
    let holds = |r: &[String]| r.iter().any(|r| r == "reviewer");
    let lacks = |_: &[String]| false;
    assert!(matches!(
        plans.take(&plan.id, "api_key:alice", |_| true),
        Err(PlanRefusal::Waiting { .. })
    ));
    assert!(matches!(
        plans.decide(
            &plan.id,
            "api_key:bob",
            Decider::Reviewer(&lacks),
            Decision::Approve
        ),
        Err(PlanRefusal::NotApprover { .. })
    ));
    assert!(
        matches!(
            plans.decide(
                &plan.id,
                "api_key:alice",
                Decider::Reviewer(&holds),
                Decision::Approve
            ),
            Err(PlanRefusal::NotApprover { .. })
        ),
        "never the caller itself"
    );
    plans
        .decide(
            &plan.id,
            "api_key:bob",
            Decider::Reviewer(&holds),
            Decision::Approve,
        )
        .unwrap();
    assert_eq!(
        plans.take(&plan.id, "api_key:alice", |_| false).err(),
        Some(PlanRefusal::Invalidated)
    );
    let other = plans.create(new_plan(&["reviewer"])).unwrap();
    plans
        .decide(&other.id, "admin", OPERATOR, Decision::Deny)
        .unwrap();
    assert_eq!(
        plans.take(&other.id, "api_key:alice", |_| true).err(),
        Some(PlanRefusal::Denied { by: "admin".into() })
    );
}

#[test]
fn plans_expire_and_the_store_is_bounded() {
    let plans = Plans::new(0, 2);
    let plan = plans.create(new_plan(&[])).unwrap();
    assert_eq!(
        plans.take(&plan.id, "api_key:alice", |_| true).err(),
        Some(PlanRefusal::Expired)
    );
    assert_eq!(plans.take_expired().len(), 1);
    assert!(plans.take_expired().is_empty(), "reported once");
    let full = Plans::new(60_000, 1);
    full.create(new_plan(&[])).unwrap();
    assert_eq!(full.create(new_plan(&[])).unwrap_err(), PlanRefusal::Full);
    let shared = Plans::new(60_000, 1_000);
    for _ in 0..MAX_PENDING_PER_CALLER {
        shared.create(new_plan(&[])).unwrap();
    }
    assert_eq!(
        shared.create(new_plan(&[])).unwrap_err(),
        PlanRefusal::TooManyOfYours(MAX_PENDING_PER_CALLER)
    );
    let other = NewPlan {
        caller: "api_key:bob".into(),
        ..new_plan(&[])
    };
    assert!(shared.create(other).is_ok(), "others still get plans");
}

#[test]
fn the_digest_does_not_depend_on_key_order() {
    let a = json!({"b": [1, {"y": 2, "x": 1}], "a": "s"});
    let b: Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).unwrap();
    assert_eq!(digest(&a), digest(&b));
    assert_ne!(digest(&a), digest(&json!({"a": "t"})));
}

const OPERATOR: Decider<'static> = Decider::Operator {
    approve_any: true,
    own: "local:admin",
};

#[test]
fn the_operator_decides_any_plan_once_and_approvals_wake_waiters() {
    let plans = Plans::new(60_000, 8);
    let mut events = plans.events.subscribe();
    // A plan its caller would approve itself: the operator may approve it too.
    let own = plans.create(new_plan(&[])).unwrap();
    plans
        .decide(&own.id, "admin", OPERATOR, Decision::Approve)
        .unwrap();
    match events.try_recv() {
        Ok(PlanEvent::Approved { id, by }) => {
            assert_eq!((id, by), (own.id.clone(), "admin".into()))
        }
        other => panic!("expected an approval event, got {other:?}"),
    }
    // The same decision again is refused with the plan's state, never a second success.
    assert_eq!(
        plans
            .decide(&own.id, "admin", OPERATOR, Decision::Approve)
            .err(),
        Some(PlanRefusal::Decided {
            state: "approved",
            by: "admin".into()
        })
    );
    assert_eq!(plans.get(&own.id).unwrap().state_label(), "approved");
    let ran = plans.take(&own.id, "api_key:alice", |_| true).unwrap();
    assert_eq!(ran.approved_by.as_deref(), Some("admin"));
    assert_eq!(
        plans
            .decide(&own.id, "admin", OPERATOR, Decision::Deny)
            .err(),
        Some(PlanRefusal::Used),
        "a plan that ran cannot be denied"
    );

    // Limited to denials: the caller's own plans stay the caller's to approve.
    let deny_only = Decider::Operator {
        approve_any: false,
        own: "local:admin",
    };
    let other = plans.create(new_plan(&[])).unwrap();
    assert_eq!(
        plans
            .decide(&other.id, "admin", deny_only, Decision::Approve)
            .err(),
        Some(PlanRefusal::OperatorMayOnlyDeny)
    );
    let deny_only = Decider::Operator {
        approve_any: false,
        own: "local:admin",
    };
    plans
        .decide(&other.id, "admin", deny_only, Decision::Deny)
        .unwrap();
    assert!(matches!(events.try_recv(), Ok(PlanEvent::Denied { .. })));

    // A reviewer never sees a plan without approvers.
    let holds = |_: &[String]| true;
    let third = plans.create(new_plan(&[])).unwrap();
    assert_eq!(
        plans
            .decide(
                &third.id,
                "api_key:bob",
                Decider::Reviewer(&holds),
                Decision::Approve
            )
            .err(),
        Some(PlanRefusal::Unknown)
    );
}
