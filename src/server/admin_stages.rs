//! `GET /admin/stages`: the workflows (states, their tools, the transitions and who may make
//! them) and every workspace that moved, with its state and history.

use serde_json::{Value, json};

use super::parts::AdminParts;

pub(super) async fn stages(admin: &AdminParts) -> (bool, Value) {
    let Some(stages) = &admin.stages else {
        return (true, json!({"workflows": [], "workspaces": []}));
    };
    let workflows: Vec<Value> = stages
        .workflows()
        .iter()
        .map(|(name, m)| {
            let states: serde_json::Map<String, Value> = m
                .states
                .iter()
                .map(|(s, st)| {
                    (
                        s.clone(),
                        json!({"description": st.description, "tools": st.globs}),
                    )
                })
                .collect();
            json!({
                "name": name,
                "initial": m.initial,
                "states": states,
                "transitions": m.transitions,
            })
        })
        .collect();
    match stages.list().await {
        Ok(workspaces) => (
            true,
            json!({
                "workflows": workflows,
                "workspaces": workspaces,
                "bound_sessions": stages.bound_sessions(),
            }),
        ),
        Err(e) => (
            false,
            json!({"error": format!("the stage store does not answer: {e}"), "workflows": workflows}),
        ),
    }
}
