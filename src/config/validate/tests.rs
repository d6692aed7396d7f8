//! Rejections of each validation part: every problem is reported, at its line, naming what is
//! wrong; a good file of the same shape loads.

use crate::config::{Diagnostic, load_str};

fn errors(text: &str) -> Vec<Diagnostic> {
    match load_str("t.toml", text) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

/// Asserts that one diagnostic contains `needle` and sits on `line`.
fn reported(text: &str, needle: &str, line: usize) {
    let errs = errors(text);
    assert!(
        errs.iter()
            .any(|d| d.message.contains(needle) && d.line == line),
        "no `{needle}` at line {line} in {errs:#?}"
    );
}

const STDIO: &str = "[upstreams.a]\nkind = \"stdio\"\ncommand = \"x\"\n";

#[test]
fn a_good_file_loads() {
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:9\"\n\n{STDIO}\n[[rate_limits]]\nby = [\"identity\"]\nper_second = 3\n"
    );
    let s = load_str("t.toml", &text).expect("valid");
    assert_eq!(s.upstreams.len(), 1);
    assert_eq!(s.rate_limits.len(), 1);
}

#[test]
fn gateway_rejections() {
    reported("[gateway]\nlisten = \"nowhere\"\n", "is not an address", 2);
    reported("[gateway]\nseparator = \"a b\"\n", "bad separator", 2);
    reported(
        "[gateway]\npage_size = 0\n",
        "page_size must be at least 1",
        2,
    );
    reported(
        "[gateway]\nprefix = \"sometimes\"\n",
        "is not one of `always`, `never`",
        2,
    );
    reported(
        &format!("[gateway]\nresource_default = \"b\"\n{STDIO}"),
        "resource_default `b` is not a configured upstream; did you mean `a`?",
        2,
    );
    // An unset variable: no test sets it.
    reported(
        "[gateway]\nstate_key = \"env:FEDGATE_TEST_UNSET_STATE_KEY\"\n",
        "state_key",
        2,
    );
    reported("[gateway]\nstate_key = \"literal\"\n", "references", 2);
}

#[test]
fn a_misspelt_field_gets_a_suggestion() {
    reported(
        "[gateway]\nseperator = \".\"\n",
        "unknown field `seperator`",
        2,
    );
    reported(
        "[gateway]\nseperator = \".\"\n",
        "did you mean `separator`?",
        2,
    );
    let far = errors("[gateway]\nzzzzzz = 1\n");
    assert!(!far[0].message.contains("did you mean"), "{far:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = errors("[gateway]\nlisten = \"x\"\npage_size = 0\n");
    assert_eq!(errs.len(), 2, "{errs:#?}");
}

#[test]
fn upstream_rejections() {
    reported(
        "[upstreams.\"a b\"]\nkind = \"stdio\"\ncommand = \"x\"\n",
        "invalid upstream name",
        1,
    );
    reported(
        "[upstreams.fedgate]\nkind = \"stdio\"\ncommand = \"x\"\n",
        "reserved for the gateway's own tools",
        1,
    );
    reported(
        "[upstreams.a]\nkind = \"carrier-pigeon\"\n",
        "is not one of stdio, http, sse",
        2,
    );
    reported(
        "[upstreams.a]\nkind = \"stdio\"\n",
        "kind stdio needs `command`",
        2,
    );
    reported(
        "[upstreams.a]\nkind = \"http\"\nurl = \"ftp://x\"\n",
        "is not an http(s) URL",
        3,
    );
    reported(
        &format!("{STDIO}era = \"bronze\"\n"),
        "is not one of auto, legacy, modern",
        4,
    );
    reported(
        &format!("{STDIO}tier = \"no-such-tier\"\n"),
        "unknown trust tier `no-such-tier`: known tiers are high, low, medium",
        4,
    );
    reported(
        &format!("{STDIO}credential = \"nope\"\n"),
        "unknown credential `nope`",
        4,
    );
    reported(&format!("{STDIO}deny = [\"[\"]\n"), "bad glob", 4);
}

#[test]
fn auth_rejections() {
    reported(
        "[auth]\n[[auth.api_keys]]\nname = \"k\"\nsha256 = \"abc\"\n",
        "sha256 must be 64 hex digits",
        4,
    );
    reported(
        "[auth]\nanonymous = true\nanonymous_roles = [\"ghost\"]\n",
        "unknown role `ghost`",
        3,
    );
    reported(
        "[auth.jwt]\nissuer = \"me\"\n",
        "needs `hs256_secret` or `jwks_file`",
        1,
    );
    reported(
        "[roles.r]\nmax_tier = \"no-such-tier\"\n",
        "max_tier: unknown trust tier `no-such-tier`",
        2,
    );
}

#[test]
fn identity_sign_in_rejections() {
    // Any readable file makes an HS256 secret.
    let jwt = concat!(
        "[auth]\n[auth.jwt]\nhs256_secret = \"file:",
        env!("CARGO_MANIFEST_DIR"),
        "/Cargo.toml\"\n"
    );
    reported(
        &format!("{jwt}[auth.jwt.sign_in]\nclient_id = \"fedgate\"\n"),
        "[auth.jwt.sign_in] needs `[auth.jwt] issuer`",
        5,
    );
    let with_issuer = format!("{jwt}issuer = \"https://idp.example\"\n[auth.jwt.sign_in]\n");
    reported(
        &format!("{with_issuer}client_id = \"fedgate\"\nclient_secret = \"hunter2\"\n"),
        "use an `env:NAME` or `file:PATH` reference",
        7,
    );
    reported(
        &format!(
            "{with_issuer}client_id = \"fedgate\"\nclient_secret = \"env:FEDGATE_TEST_UNSET_OIDC\"\n"
        ),
        "auth.jwt.sign_in.client_secret",
        7,
    );
    reported(
        &format!("{jwt}issuer = \"idp\"\n[auth.jwt.sign_in]\nclient_id = \"fedgate\"\n"),
        "is no http(s) URL",
        6,
    );
    let ok = load_str(
        "t.toml",
        &format!("{with_issuer}client_id = \"fedgate\"\nscopes = [\"email\", \"openid\"]\n"),
    )
    .expect("valid");
    let sign_in = ok
        .auth
        .jwt
        .as_ref()
        .and_then(|j| j.sign_in.clone())
        .expect("sign_in");
    assert_eq!(sign_in.scopes, ["openid", "email"]);
    assert_eq!(sign_in.issuer, "https://idp.example");
}

#[test]
fn credential_rejections() {
    reported(
        "[credentials.c]\nclass = \"internal\"\nsource = \"exec:\"\n",
        "`exec:` needs a command",
        3,
    );
    reported(
        "[credentials.c]\nclass = \"internal\"\n",
        "set exactly one of `source`, `oauth` and `per_user`",
        1,
    );
    reported(
        "[credentials.c]\nclass = \"internal\"\noauth = { grant = \"magic\", token_url = \"http://t\", client_id = \"i\", client_secret = \"env:S\" }\n",
        "grant `magic` is not client_credentials or token_exchange",
        1,
    );
}

#[test]
fn per_user_oauth_rejections() {
    let cred =
        |fields: &str| format!("[credentials.c]\nclass = \"user\"\nper_user = {{ {fields} }}\n");
    reported(
        &cred("kind = \"oauth\", client_secret = \"env:S\""),
        "without `client_id` registers itself",
        3,
    );
    reported(
        &cred(
            "kind = \"oauth\", authorization_url = \"https://as/a\", token_url = \"https://as/t\"",
        ),
        "without `client_id` registers itself",
        3,
    );
    reported(
        &cred("kind = \"oauth\", client_id = \"i\", client_secret = \"plain\""),
        "secrets are references",
        3,
    );
    reported(
        &cred("kind = \"oauth\", client_id = \"i\", token_url = \"https://as/token\""),
        "set both `authorization_url` and `token_url`, or neither",
        3,
    );
    reported(
        &cred(
            "kind = \"oauth\", client_id = \"i\", authorization_url = \"ftp://as\", token_url = \"https://as/token\"",
        ),
        "`authorization_url` is not an http(s) URL",
        3,
    );
    reported(
        &cred("kind = \"oauth\", client_id = \"i\", scopes = [\"a b\"]"),
        "scope `a b` is not a valid OAuth scope",
        3,
    );
    reported(
        &cred("kind = \"oauth\", client_id = \"i\", hint = \"paste\""),
        "`hint` belongs to per_user kind `token`",
        3,
    );
    reported(
        &cred("kind = \"token\", client_id = \"i\""),
        "`client_id` belongs to per_user kind `oauth`",
        3,
    );
    reported(
        &cred("kind = \"saml\""),
        "per_user kind `saml` is not `token` or `oauth`",
        3,
    );
}

#[test]
fn rate_limit_rejections() {
    reported(
        "[[rate_limits]]\nby = [\"moon\"]\nper_second = 1\n",
        "rate limit key `moon`",
        2,
    );
    reported(
        "[[rate_limits]]\nupstream = \"ghost\"\nper_second = 1\n",
        "unknown upstream `ghost`",
        2,
    );
    reported(
        "[[rate_limits]]\nper_second = 0\n",
        "per_second must be greater than 0",
        1,
    );
}

#[test]
fn tracing_rejections() {
    reported(
        "[tracing]\nprotocol = \"grpc\"\n",
        "use `http/protobuf` or `http/json`",
        1,
    );
    reported(
        "[tracing]\notlp_endpoint = \"udp://x\"\n",
        "is not an http(s) URL",
        1,
    );
    reported(
        "[tracing]\nsample_ratio = 2.0\n",
        "sample_ratio must be between 0.0 and 1.0",
        1,
    );
}

#[test]
fn every_parse_problem_is_reported_at_its_own_line() {
    let text = "[gateway]\npage_size = \"100\"\nseperator = \".\"\n\n\
                [upstreams.a]\nkind = \"stdio\"\ncommand = \"x\"\nstartup_timeout_ms = \"5s\"\n\
                call_timeout_ms = true\n";
    let errs = errors(text);
    let at = |line: usize, needle: &str| {
        assert!(
            errs.iter()
                .any(|d| d.line == line && d.message.contains(needle)),
            "no `{needle}` at line {line} in {errs:#?}"
        );
    };
    at(
        2,
        "page_size must be a whole number, got the string \"100\"",
    );
    at(3, "did you mean `separator`?");
    at(
        8,
        "startup_timeout_ms must be a whole number of milliseconds",
    );
    at(
        9,
        "call_timeout_ms must be a whole number of milliseconds, got `true`",
    );
    assert_eq!(errs.len(), 4, "each problem once: {errs:#?}");
    // A missing required field is reported once, not again as the blanked key.
    let errs = errors("[upstreams.a]\nkind = 5\ncommand = \"x\"\n");
    assert_eq!(errs.len(), 1, "{errs:#?}");
    // A TOML syntax error stands alone: what follows it cannot be read reliably.
    let errs = errors("[gateway]\nlisten = \"127.0.0.1:1\nseperator = 5\n");
    assert_eq!(errs.len(), 1, "{errs:#?}");
}

#[test]
fn guardrail_hook_rejections() {
    reported(
        "[guardrail_hooks.h]\nurl = \"ftp://x\"\n",
        "must be an http:// or https:// URL",
        2,
    );
    reported(
        "[guardrail_hooks.h]\nurl = \"http://x\"\ntimeout_ms = 0\n",
        "timeout_ms must be",
        3,
    );
    reported(
        "[guardrail_hooks.h]\nurl = \"http://x\"\nfailure = \"maybe\"\n",
        "use `closed` or `open`",
        3,
    );
    reported(
        "[guardrail_hooks.h]\nurl = \"http://x\"\ntoken = \"hunter2\"\n",
        "token is a reference",
        3,
    );
    reported(
        &format!("{STDIO}guardrails = {{ hooks = [\"nope\"] }}\n"),
        "unknown guardrail hook `nope`",
        1,
    );
    let good = format!(
        "[guardrail_hooks.h]\nurl = \"http://127.0.0.1:9/check\"\nfailure = \"open\"\n\n{STDIO}guardrails = {{ hooks = [\"h\"] }}\n"
    );
    let s = load_str("t.toml", &good).expect("valid");
    let hooks = &s.upstreams[0].guardrail_hooks;
    assert_eq!(hooks.len(), 1);
    assert!(hooks[0].fail_open);
}

#[test]
fn guardrail_rule_rejections() {
    reported(
        &format!(
            "{STDIO}guardrails = {{ detectors = [{{ name = \"acme\", pattern = \"acme_[a-z\" }}] }}\n"
        ),
        "its pattern does not compile",
        1,
    );
    reported(
        &format!(
            "{STDIO}guardrails = {{ detectors = [{{ name = \"acme\", pattern = \"a*\" }}] }}\n"
        ),
        "can match empty text",
        1,
    );
    reported(
        &format!("{STDIO}guardrails = {{ allow = [{{ field = \"/x\", detector = \"nope\" }}] }}\n"),
        "unknown detector `nope`",
        1,
    );
    reported(
        &format!("{STDIO}guardrails = {{ max_findings = 0 }}\n"),
        "nonzero",
        4,
    );
    let good = format!(
        "{STDIO}guardrails = {{ pii = [\"email\"], detectors = [{{ name = \"acme\", pattern = \
         \"acme_[a-z0-9]{{16}}\" }}], allow = [{{ field = \"/sha\", detector = \"acme\" }}] }}\n"
    );
    let s = load_str("t.toml", &good).expect("valid");
    assert_eq!(
        s.upstreams[0].guardrails.rules.raw.detectors[0].name,
        "acme"
    );
}
