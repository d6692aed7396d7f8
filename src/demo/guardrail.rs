//! `fedgate demo-guardrail`: an external guardrail service for tests and trying hooks out. It
//! answers the hook protocol (`guard::hook`) by what a call's string arguments or its result's
//! first text ask for:
//!
//! - request phase: `deny-me` → deny; `mutate-me` → arguments with it replaced by `mutated`;
//!   `bad-mutate` → arguments the demo's `echo` schema refuses; `garbage` → an HTML page;
//!   `hang` → no answer;
//! - response phase: `withhold-me` → deny; `rewrite-me` → a new result;
//! - definitions phase, by the tool's description: `collector` → deny; `(v2)` or `id_rsa` → 4 MiB that
//!   are not an answer;
//! - anything else → pass. `GET /last` shows the last payload it got (tests check what hooks
//!   are told).

use super::DemoError;
use std::{convert::Infallible, net::SocketAddr, process::ExitCode, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};

#[derive(Debug, clap::Args)]
pub struct GuardrailArgs {
    /// Where to listen (port 0: any free port; the URL is printed first).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

pub async fn run(args: GuardrailArgs) -> Result<ExitCode, DemoError> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("demo guardrail: cannot listen on {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("demo guardrail listening on http://{local}/check");
    let last: Arc<Mutex<Value>> = Arc::default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let last = last.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, last.clone()));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    last: Arc<Mutex<Value>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == hyper::Method::GET {
        return Ok(reply(&last.lock().clone()));
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    *last.lock() = payload.clone();
    let phase = payload["phase"].as_str().unwrap_or_default();
    // The words it decides by: in any string argument, or in the result's first text (of a
    // tool result, a prompt's first message, or a resource's first contents).
    let text = match phase {
        "definitions" => payload["tool"]["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        "request" => payload["arguments"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
        _ => [
            &payload["result"]["content"][0]["text"],
            &payload["result"]["messages"][0]["content"]["text"],
            &payload["result"]["contents"][0]["text"],
        ]
        .into_iter()
        .find_map(Value::as_str)
        .unwrap_or_default()
        .to_owned(),
    };
    let decision = match phase {
        "request" if text.contains("hang") => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json!({"decision": "pass"})
        }
        "request" if text.contains("garbage") => {
            return Ok(Response::new(Full::new(Bytes::from_static(
                b"<html>Service Unavailable</html>",
            ))));
        }
        "request" if text.contains("deny-me") => {
            json!({"decision": "deny", "reason": "the text asks to be denied"})
        }
        "request" if text.contains("bad-mutate") => {
            json!({"decision": "mutate", "arguments": {"text": 5}})
        }
        "request" if text.contains("mutate-me") => {
            let mut args = payload["arguments"].clone();
            if let Some(m) = args.as_object_mut() {
                for v in m.values_mut() {
                    if let Some(s) = v.as_str() {
                        *v = json!(s.replace("mutate-me", "mutated"));
                    }
                }
            }
            json!({"decision": "mutate", "arguments": args})
        }
        "response" if text.contains("withhold-me") => {
            json!({"decision": "deny", "reason": "the answer is not for this caller"})
        }
        "response" if text.contains("rewrite-me") => json!({"decision": "mutate", "result": {
            "content": [{"type": "text", "text": "rewritten by the guardrail"}]
        }}),
        "definitions" if text.contains("collector") => {
            json!({"decision": "deny", "reason": "it sends results to a collector"})
        }
        // Far more than any verdict: a hook must not make fedgate read it all.
        "definitions" if text.contains("(v2)") || text.contains("id_rsa") => {
            return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; 4 << 20]))));
        }
        _ => json!({"decision": "pass"}),
    };
    Ok(reply(&decision))
}

fn reply(v: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}
