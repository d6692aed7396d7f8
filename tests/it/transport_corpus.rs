//! fedgate's transport against rmcp's: one corpus of requests (valid, unusual and malformed, both
//! eras, every SEP-2243 header form) sent to fedgate's own `/mcp` and to rmcp's
//! `StreamableHttpService` serving the same gateway handler on the same config
//! (`fedgate-testkit rmcp-edge`). Each answer is reduced to its status and its JSON-RPC shape
//! (a result, an error code, nothing); the two must agree except where `DELIBERATE` says why
//! fedgate answers otherwise, and fedgate must never call a known method unknown.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use crate::common::*;

const HANDSHAKE: &str = "2025-11-25";
const STATELESS: &str = "2026-07-28";
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"corpus","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
/// `_meta` of a client that declares the tasks extension (SEP-2663): `tasks/*` are its methods.
const META_TASKS: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"corpus","version":"0"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
/// Cases whose method the client has not been offered, so -32601 is the right answer.
const NOT_OFFERED: &[&str] = &["stateless tasks/get, the tasks extension not declared"];
/// Methods the gateway serves in each era: an answer of -32601 to one of them is a transport
/// bug. (The handshake era is offered no tasks; the stateless era has no `ping`.)
const KNOWN_HANDSHAKE: &[&str] = &["initialize", "ping", "tools/list", "tools/call"];
const KNOWN_STATELESS: &[&str] = &["tools/list", "tools/call", "tasks/get", "tasks/cancel"];

/// What an answer comes down to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    status: u16,
    /// `result`, `error <code>` or `none`.
    json_rpc: String,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.json_rpc)
    }
}

/// One request of the corpus. In the handshake era, `session` says whether the request carries
/// the session the edge under test opened for this run.
struct Case {
    name: &'static str,
    method: http::Method,
    headers: Vec<(&'static str, String)>,
    session: bool,
    body: String,
}

fn post(name: &'static str, headers: &[(&'static str, &str)], body: &str) -> Case {
    Case {
        name,
        method: http::Method::POST,
        headers: headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        session: false,
        body: body.to_owned(),
    }
}

fn in_session(mut c: Case) -> Case {
    c.session = true;
    c.headers.push(("mcp-protocol-version", HANDSHAKE.into()));
    c
}

const JSON: (&str, &str) = ("content-type", "application/json");
const ACCEPT: (&str, &str) = ("accept", "application/json, text/event-stream");

fn initialize(version: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"corpus","version":"0"}}}}}}"#
    )
}

fn request(id: u32, method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

fn handshake_corpus() -> Vec<Case> {
    let call = |args: &str| {
        request(
            3,
            "tools/call",
            &format!(r#"{{"name":"d__echo","arguments":{args}}}"#),
        )
    };
    vec![
        post("initialize", &[JSON, ACCEPT], &initialize(HANDSHAKE)),
        post(
            "initialize of an older version",
            &[JSON, ACCEPT],
            &initialize("2025-03-26"),
        ),
        post("initialize, not JSON", &[JSON, ACCEPT], "{not json"),
        post("initialize, empty body", &[JSON, ACCEPT], ""),
        post(
            "initialize, text/plain",
            &[("content-type", "text/plain"), ACCEPT],
            &initialize(HANDSHAKE),
        ),
        post(
            "initialize, accepts JSON only",
            &[JSON, ("accept", "application/json")],
            &initialize(HANDSHAKE),
        ),
        post(
            "initialize, accepts nothing it can send",
            &[JSON, ("accept", "text/html")],
            &initialize(HANDSHAKE),
        ),
        post(
            "tools/list without a session",
            &[JSON, ACCEPT, ("mcp-protocol-version", HANDSHAKE)],
            &request(2, "tools/list", "{}"),
        ),
        post(
            "tools/list in a forged session",
            &[
                JSON,
                ACCEPT,
                ("mcp-protocol-version", HANDSHAKE),
                ("mcp-session-id", "forged-session"),
            ],
            &request(2, "tools/list", "{}"),
        ),
        in_session(post(
            "tools/list",
            &[JSON, ACCEPT],
            &request(2, "tools/list", "{}"),
        )),
        in_session(post(
            "tools/call",
            &[JSON, ACCEPT],
            &call(r#"{"text":"hi"}"#),
        )),
        in_session(post(
            "tools/call, arguments a string",
            &[JSON, ACCEPT],
            &call(r#""hi""#),
        )),
        in_session(post(
            "tools/call, no name",
            &[JSON, ACCEPT],
            &request(3, "tools/call", "{}"),
        )),
        in_session(post(
            "tools/call of an unknown tool",
            &[JSON, ACCEPT],
            &request(3, "tools/call", r#"{"name":"nope__nothing"}"#),
        )),
        in_session(post("ping", &[JSON, ACCEPT], &request(4, "ping", "{}"))),
        in_session(post(
            "unknown method",
            &[JSON, ACCEPT],
            &request(5, "no/such/method", "{}"),
        )),
        in_session(post(
            "jsonrpc 1.0",
            &[JSON, ACCEPT],
            r#"{"jsonrpc":"1.0","id":6,"method":"ping"}"#,
        )),
        in_session(post(
            "a notification",
            &[JSON, ACCEPT],
            r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#,
        )),
        in_session(post(
            "a response nobody asked for",
            &[JSON, ACCEPT],
            r#"{"jsonrpc":"2.0","id":"x","result":{}}"#,
        )),
        in_session(post(
            "tasks/get of a forged task",
            &[JSON, ACCEPT],
            &request(7, "tasks/get", r#"{"taskId":"forged"}"#),
        )),
        in_session(post(
            "tasks/get without a task id",
            &[JSON, ACCEPT],
            &request(7, "tasks/get", "{}"),
        )),
        in_session(post(
            "a JSON array",
            &[JSON, ACCEPT],
            &format!("[{}]", request(8, "ping", "{}")),
        )),
        in_session(post("a JSON string", &[JSON, ACCEPT], r#""ping""#)),
        Case {
            name: "GET without a session",
            method: http::Method::GET,
            headers: vec![("accept", "text/event-stream".into())],
            session: false,
            body: String::new(),
        },
        Case {
            name: "PUT",
            method: http::Method::PUT,
            headers: vec![JSON, ACCEPT]
                .into_iter()
                .map(|(k, v)| (k, v.to_owned()))
                .collect(),
            session: false,
            body: request(9, "ping", "{}"),
        },
        Case {
            name: "DELETE of a forged session",
            method: http::Method::DELETE,
            headers: vec![("mcp-session-id", "forged-session".into())],
            session: false,
            body: String::new(),
        },
    ]
}

fn stateless_corpus() -> Vec<Case> {
    let b64 = |s: &str| {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
    };
    let call = |args: &str| {
        request(
            3,
            "tools/call",
            &format!(r#"{{"name":"d__echo","arguments":{args},{META}}}"#),
        )
    };
    let era = ("mcp-protocol-version", STATELESS);
    let named = |name: &str| -> Vec<(&'static str, String)> {
        vec![
            (JSON.0, JSON.1.into()),
            (ACCEPT.0, ACCEPT.1.into()),
            (era.0, era.1.into()),
            ("mcp-method", "tools/call".into()),
            ("mcp-name", name.to_owned()),
        ]
    };
    let with = |name: &'static str, headers: Vec<(&'static str, String)>, body: String| Case {
        name,
        method: http::Method::POST,
        headers,
        session: false,
        body,
    };
    vec![
        post(
            "stateless tools/list",
            &[JSON, ACCEPT, era, ("mcp-method", "tools/list")],
            &request(2, "tools/list", &format!("{{{META}}}")),
        ),
        post(
            "stateless tools/list without _meta",
            &[JSON, ACCEPT, era, ("mcp-method", "tools/list")],
            &request(2, "tools/list", "{}"),
        ),
        post(
            "stateless tools/list without Mcp-Method",
            &[JSON, ACCEPT, era],
            &request(2, "tools/list", &format!("{{{META}}}")),
        ),
        post(
            "stateless tools/list, Mcp-Method of another method",
            &[JSON, ACCEPT, era, ("mcp-method", "prompts/list")],
            &request(2, "tools/list", &format!("{{{META}}}")),
        ),
        with(
            "stateless tools/call, plain Mcp-Name",
            named("d__echo"),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call, Base64 Mcp-Name",
            named(&b64("d__echo")),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call, Base64 Mcp-Name of another tool",
            named(&b64("d__add")),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call, undecodable Base64 Mcp-Name",
            named("=?base64?***?="),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call, Mcp-Name of another tool",
            named("d__add"),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call without Mcp-Name",
            named("d__echo").into_iter().take(4).collect(),
            call(r#"{"text":"hi"}"#),
        ),
        with(
            "stateless tools/call, arguments a string",
            named("d__echo"),
            call(r#""hi""#),
        ),
        with(
            "stateless tools/call, arguments a string, Base64 Mcp-Name",
            named(&b64("d__echo")),
            call(r#""hi""#),
        ),
        post(
            "stateless tasks/get without Mcp-Name",
            &[JSON, ACCEPT, era, ("mcp-method", "tasks/get")],
            &request(7, "tasks/get", &format!(r#"{{"taskId":"forged",{META}}}"#)),
        ),
        post(
            "stateless tasks/get of a forged task",
            &[
                JSON,
                ACCEPT,
                era,
                ("mcp-method", "tasks/get"),
                ("mcp-name", "forged"),
            ],
            &request(
                7,
                "tasks/get",
                &format!(r#"{{"taskId":"forged",{META_TASKS}}}"#),
            ),
        ),
        with(
            "stateless tasks/get of a forged task, Base64 Mcp-Name",
            vec![
                (JSON.0, JSON.1.into()),
                (ACCEPT.0, ACCEPT.1.into()),
                (era.0, era.1.into()),
                ("mcp-method", "tasks/get".into()),
                ("mcp-name", b64("fgt1.AAAA.BBBB")),
            ],
            request(
                7,
                "tasks/get",
                &format!(r#"{{"taskId":"fgt1.AAAA.BBBB",{META_TASKS}}}"#),
            ),
        ),
        post(
            "stateless tasks/get without a task id",
            &[
                JSON,
                ACCEPT,
                era,
                ("mcp-method", "tasks/get"),
                ("mcp-name", "forged"),
            ],
            &request(7, "tasks/get", &format!("{{{META_TASKS}}}")),
        ),
        post(
            "stateless tasks/get, the tasks extension not declared",
            &[
                JSON,
                ACCEPT,
                era,
                ("mcp-method", "tasks/get"),
                ("mcp-name", "forged"),
            ],
            &request(7, "tasks/get", &format!(r#"{{"taskId":"forged",{META}}}"#)),
        ),
        post(
            "stateless tasks/cancel of a forged task",
            &[
                JSON,
                ACCEPT,
                era,
                ("mcp-method", "tasks/cancel"),
                ("mcp-name", "forged"),
            ],
            &request(
                7,
                "tasks/cancel",
                &format!(r#"{{"taskId":"forged",{META_TASKS}}}"#),
            ),
        ),
        post(
            "stateless ping",
            &[JSON, ACCEPT, era, ("mcp-method", "ping")],
            &request(4, "ping", &format!("{{{META}}}")),
        ),
        post(
            "stateless unknown method",
            &[JSON, ACCEPT, era, ("mcp-method", "no/such/method")],
            &request(5, "no/such/method", &format!("{{{META}}}")),
        ),
        post(
            "stateless, a version nobody speaks",
            &[
                JSON,
                ACCEPT,
                ("mcp-protocol-version", "1999-01-01"),
                ("mcp-method", "tools/list"),
            ],
            &request(2, "tools/list", &format!("{{{META}}}")),
        ),
    ]
}

/// Differences on purpose: (case, rmcp's answer, fedgate's answer, why). Beyond these, one
/// rule holds everywhere (`agree`): where rmcp refuses with a plain-text body, fedgate refuses
/// with the same status and a JSON-RPC error, which a client can read.
const DELIBERATE: &[(&str, &str, &str, &str)] = &[
    (
        "initialize, not JSON",
        "415 none",
        "400 error -32700",
        "the media type is right and the body is not JSON: JSON-RPC's parse error",
    ),
    (
        "initialize, empty body",
        "415 none",
        "400 error -32700",
        "an empty body is no JSON: JSON-RPC's parse error",
    ),
    (
        "jsonrpc 1.0",
        "415 none",
        "400 error -32600",
        "JSON, but not a JSON-RPC 2.0 message: an invalid request, not a media type",
    ),
    (
        "a JSON array",
        "415 none",
        "400 error -32600",
        "a batch, which neither era allows: an invalid request",
    ),
    (
        "a JSON string",
        "415 none",
        "400 error -32600",
        "JSON that is no message: an invalid request",
    ),
    (
        "DELETE of a forged session",
        "202 none",
        "404 error -32000",
        "the transport spec answers a session id that is no session 404, a DELETE too",
    ),
];

/// Whether fedgate's answer `ours` is rmcp's `theirs`, or the same refusal with a JSON-RPC body.
fn agree(theirs: &Shape, ours: &Shape) -> bool {
    theirs == ours
        || (theirs.status == ours.status
            && theirs.status >= 400
            && theirs.json_rpc == "none"
            && ours.json_rpc.starts_with("error "))
}

/// Sends `case` to `url` and reduces the answer to its shape.
async fn send(client: &reqwest::Client, url: &str, session: Option<&str>, case: &Case) -> Shape {
    let mut r = client
        .request(case.method.clone(), url)
        .body(case.body.clone());
    for (k, v) in &case.headers {
        r = r.header(*k, v.as_str());
    }
    if case.session
        && let Some(sid) = session
    {
        r = r.header("mcp-session-id", sid);
    }
    let answer = r.send().await.expect("send");
    let status = answer.status().as_u16();
    let sse = answer
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    // A GET stream stays open: its status is the answer.
    let text = if sse && case.method == http::Method::GET {
        String::new()
    } else {
        answer.text().await.unwrap_or_default()
    };
    let message = raw::last_message(&text);
    let json_rpc = if message.get("result").is_some() {
        "result".to_owned()
    } else if let Some(code) = message["error"]["code"].as_i64() {
        format!("error {code}")
    } else {
        "none".to_owned()
    };
    Shape { status, json_rpc }
}

/// Opens a handshake-era session on `url`: its id.
async fn open_session(client: &reqwest::Client, url: &str) -> String {
    let r = client
        .post(url)
        .header(JSON.0, JSON.1)
        .header(ACCEPT.0, ACCEPT.1)
        .body(initialize(HANDSHAKE))
        .send()
        .await
        .expect("initialize");
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let _ = r.text().await;
    let done = client
        .post(url)
        .header(JSON.0, JSON.1)
        .header(ACCEPT.0, ACCEPT.1)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", HANDSHAKE)
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await
        .expect("initialized");
    assert_eq!(done.status().as_u16(), 202);
    sid
}

/// The method a case's body names, when it is one request.
fn method_of(case: &Case) -> Option<String> {
    let v: Value = serde_json::from_str(&case.body).ok()?;
    v["method"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn fedgate_answers_the_corpus_as_rmcp_does_but_where_it_says_why() {
    // The fixture serves tasks (stateless era), so the gateway offers `tasks/*`.
    let fixture = UrlProcess::fixture();
    let config = format!(
        "{}\n[upstreams.fx]\nkind = \"http\"\nurl = \"{}\"\nera = \"modern\"\n",
        stdio_upstream("d", &[], ""),
        fixture.url
    );
    let gw = Gateway::start(&config);
    let cfg = gw.dir.path().join("gateway.toml");
    assert!(Path::new(&cfg).is_file(), "the gateway's config file");
    let reference = UrlProcess::testkit(&["rmcp-edge", "--config", &cfg.to_string_lossy()]);
    let client = reqwest::Client::new();
    let ours = open_session(&client, &gw.url).await;
    let theirs = open_session(&client, &reference.url).await;
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    let corpus = (handshake_corpus().into_iter().map(|c| (c, KNOWN_HANDSHAKE)))
        .chain(stateless_corpus().into_iter().map(|c| (c, KNOWN_STATELESS)));
    for (case, known) in corpus {
        let case = &case;
        let a = send(&client, &reference.url, Some(&theirs), case).await;
        let b = send(&client, &gw.url, Some(&ours), case).await;
        report.push(format!("{:<60} rmcp {a:<14} fedgate {b}", case.name));
        if method_of(case).is_some_and(|m| known.contains(&m.as_str()))
            && !NOT_OFFERED.contains(&case.name)
            && b.json_rpc == "error -32601"
        {
            wrong.push(format!(
                "{}: fedgate calls a known method unknown",
                case.name
            ));
        }
        match DELIBERATE.iter().find(|d| d.0 == case.name) {
            Some((_, rmcp, fedgate, _)) if a.to_string() != *rmcp || b.to_string() != *fedgate => {
                wrong.push(format!(
                    "{}: listed as rmcp `{rmcp}` / fedgate `{fedgate}`, got `{a}` / `{b}`",
                    case.name
                ));
            }
            Some(_) => {}
            None if !agree(&a, &b) => {
                wrong.push(format!("{}: rmcp `{a}`, fedgate `{b}`", case.name))
            }
            None => {}
        }
        assert!(b.status < 500 || b.status == 503, "{}: {b}", case.name);
    }
    assert!(
        wrong.is_empty(),
        "{}\n\nanswers:\n{}",
        wrong.join("\n"),
        report.join("\n")
    );
}
