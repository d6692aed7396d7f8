use http::Request;

use super::*;

fn gate() -> Gate {
    Gate::new(
        &[
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
            "gw.example:8443".into(),
        ],
        &[
            "http://localhost:3000".into(),
            "https://app.example:*".into(),
            "https://portless.example".into(),
            "null".into(),
            "https://bad.example:443:*".into(),
        ],
    )
}

fn parts(method: Method, headers: &[(&str, &str)]) -> Parts {
    let mut rb = Request::builder().method(method).uri("/mcp");
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    rb.body(()).unwrap().into_parts().0
}

const POST_OK: [(&str, &str); 2] = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
];

fn post(extra: &[(&str, &str)]) -> Result<(), WireError> {
    let mut h = POST_OK.to_vec();
    h.extend_from_slice(extra);
    gate().check(&parts(Method::POST, &h))
}

fn refused(r: Result<(), WireError>) -> u16 {
    r.err().map_or(200, |e| e.status().as_u16())
}

#[test]
fn hosts_match_by_name_and_port_when_one_is_configured() {
    for (host, status) in [
        ("localhost", 200),
        ("LOCALHOST:8930", 200),
        ("127.0.0.1:1", 200),
        ("[::1]:8930", 200),
        ("gw.example:8443", 200),
        ("gw.example:8444", 403),
        ("gw.example", 403),
        ("evil.example", 403),
        ("10.1.2.3:8930", 403),
        ("local host", 400),
    ] {
        assert_eq!(refused(post(&[("host", host)])), status, "{host}");
    }
    assert_eq!(
        refused(gate().check(&parts(Method::POST, &POST_OK))),
        400,
        "no Host header and no authority"
    );
}

#[test]
fn origins_match_as_rmcp_reads_them() {
    for (origin, status) in [
        ("http://localhost:3000", 200),
        ("HTTP://LOCALHOST:3000", 200),
        ("http://localhost:3000/", 200),
        ("http://localhost:3001", 403),
        ("https://app.example:9999", 200),
        ("https://app.example", 200),
        ("http://app.example:9999", 403),
        ("https://portless.example:1234", 200),
        ("null", 200),
        ("https://bad.example", 403),
        ("not an origin", 403),
        ("", 403),
    ] {
        assert_eq!(
            refused(post(&[("host", "localhost"), ("origin", origin)])),
            status,
            "{origin:?}"
        );
    }
}

#[test]
fn media_types_methods_and_weights() {
    let with = |method: Method, h: &[(&str, &str)]| {
        let mut h = h.to_vec();
        h.push(("host", "localhost"));
        refused(gate().check(&parts(method, &h)))
    };
    let json = ("content-type", "application/json; charset=utf-8");
    for (accept, status) in [
        ("application/json, text/event-stream", 200),
        ("application/json;q=0.5, text/event-stream", 200),
        ("application/json, text/event-stream;q=0", 406),
        ("application/json, text/event-stream;q=0.000", 406),
        ("application/json, text/event-stream;q=0.0000", 200),
        ("application/json;foo=\"a,b;q=0\", text/event-stream", 200),
        ("application/json", 406),
        ("*/*", 406),
    ] {
        assert_eq!(
            with(Method::POST, &[("accept", accept), json]),
            status,
            "{accept}"
        );
    }
    // Two Accept headers count together.
    assert_eq!(
        with(
            Method::POST,
            &[
                ("accept", "application/json"),
                ("accept", "text/event-stream"),
                json
            ]
        ),
        200
    );
    for ct in [
        "text/plain",
        "application/jsonx",
        "",
        "application/json-seq",
    ] {
        assert_eq!(
            with(Method::POST, &[POST_OK[0], ("content-type", ct)]),
            415,
            "{ct}"
        );
    }
    assert_eq!(with(Method::POST, &[POST_OK[0]]), 415);
    assert_eq!(with(Method::GET, &[("accept", "text/event-stream")]), 200);
    assert_eq!(with(Method::GET, &[("accept", "application/json")]), 406);
    assert_eq!(with(Method::DELETE, &[]), 200);
    assert_eq!(with(Method::PUT, &[]), 405);
    assert_eq!(with(Method::PATCH, &POST_OK), 405);
}

#[test]
fn bodies_rmcp_cannot_read_are_parse_errors_or_not_json_rpc() {
    for (body, code) in [
        (&b"{bad json"[..], -32700),
        (b"\x00\x01", -32700),
        (b"[]", -32600),
        (
            b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            -32600,
        ),
        (b"\"just a string\"", -32600),
        (
            b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}",
            -32600,
        ),
        (b"{\"id\":1}", -32600),
    ] {
        let e = decodable(body).expect_err("refused");
        assert_eq!(e.object()["error"]["code"], code, "{body:?}");
        assert_eq!(e.status().as_u16(), 400);
    }
    for body in [
        &b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"[..],
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}",
    ] {
        assert!(decodable(body).is_ok(), "{body:?}");
    }
}

#[test]
fn a_refused_method_names_the_allowed_ones() {
    let r = WireError::MethodNotAllowed.response();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["allow"], ALLOWED_METHODS);
}

#[test]
fn ranges_weighted_zero_are_not_accepted() {
    for (param, ok) in [
        ("q=1", true),
        ("q=0.5", true),
        (" q = 0.001", true),
        ("level=1", true),
        ("q=0", false),
        ("q=0.", false),
        ("Q=0.000", false),
        // not a weight rmcp reads as zero
        ("q=0.0000", true),
    ] {
        assert_eq!(acceptable_weight(param), ok, "{param}");
    }
}
