//! Arguments: a `tools/call` whose arguments miss the tool's input schema is refused as
//! `invalid` before it goes anywhere, with one problem per field and a form to fill in. The
//! schema was compiled when the tool's list was stored; a tool whose schema does not compile,
//! or whose upstream or tool sets `validate_arguments = false`, is passed on unchecked.

use std::sync::Arc;

use serde_json::Value;

use super::{
    Call, CallError, CallFuture, Exposed, Op, OwnTools, TargetKind,
    step::{CallService, Step, done},
};
use crate::{envelope::ask_for, policy::arguments::ArgCheck};

#[derive(Debug, Clone)]
pub struct Arguments {
    /// The gateway's own tools, with their compiled schemas.
    pub own: OwnTools,
}

impl Step for Arguments {
    fn run<S: CallService>(&self, inner: &mut S, mut call: Call) -> CallFuture {
        let Some(target) = call.target.as_ref() else {
            return inner.call(call);
        };
        let Op::CallTool(p) = &mut call.op else {
            return inner.call(call);
        };
        let (check, schema): (Arc<ArgCheck>, Arc<rmcp::model::JsonObject>) = match &target.kind {
            TargetKind::Upstream(route) => {
                if !route.spec.tool_policy(&p.name).validate_arguments {
                    return inner.call(call);
                }
                let lists = &route.lists;
                match (lists.check(&p.name), lists.tool(&p.name)) {
                    (Some(c), Some(t)) => (c.clone(), t.input_schema.clone()),
                    _ => return inner.call(call),
                }
            }
            TargetKind::Gateway(tool) => match self.own.check(&p.name) {
                Some(c) => (c, tool.definition().input_schema),
                None => return inner.call(call),
            },
        };
        // Checked in place: the arguments are lent as a JSON value and put back.
        let args = Value::Object(p.arguments.take().unwrap_or_default());
        let problems = check.check(&args);
        if let Value::Object(m) = args {
            p.arguments = Some(m);
        }
        if problems.is_empty() {
            return inner.call(call);
        }
        let tool = match &target.exposed {
            Exposed::Tool(n) => n.clone(),
            _ => p.name.to_string(),
        };
        let schema = Value::Object((*schema).clone());
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let fields: Vec<(String, bool)> = problems
            .iter()
            .map(|pr| {
                let top = pr.pointer.split('/').nth(1).unwrap_or_default();
                (
                    pr.pointer.clone(),
                    pr.missing.is_some() || required.contains(&top),
                )
            })
            .collect();
        let ask = ask_for(&tool, &schema, &fields);
        done(Err(CallError::InvalidArguments {
            tool,
            problems,
            ask: Box::new(ask),
        }))
    }
}
