//! Links connect once per person and upstream, waiting calls wake, retry states answer only
//! their person and upstream.

use super::*;

fn creds(dir: &Path) -> UserCredentials {
    let sealer = Sealer::new(&Secret::new("k".repeat(32)), &[]).unwrap();
    let registry = prometheus::Registry::new();
    let metrics = CredentialMetrics::register(&registry).unwrap();
    UserCredentials::open(
        sealer,
        &dir.join("c.db"),
        None,
        Some("http://gw".into()),
        metrics,
    )
    .unwrap()
}

fn state_of(url: &str) -> &str {
    url.split("state=").nth(1).unwrap()
}

#[tokio::test]
async fn a_link_connects_once_for_its_person_and_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let c = creds(dir.path());
    let ask = c.ask("alice", "gh").unwrap();
    assert!(ask.url.starts_with("http://gw/connect/gh?state="));
    let state = state_of(&ask.url);
    assert_eq!(
        c.submit("jira", state, "t").await.unwrap_err(),
        Refused::OtherUpstream
    );
    assert_eq!(
        c.submit("gh", "00ff", "t").await.unwrap_err(),
        Refused::BadState
    );
    assert_eq!(
        c.submit("gh", state, "a b").await.unwrap_err(),
        Refused::TokenMalformed
    );
    assert_eq!(
        c.submit("gh", state, &"x".repeat(MAX_TOKEN_BYTES + 1))
            .await
            .unwrap_err(),
        Refused::TokenTooLong
    );
    assert_eq!(c.token("alice", "gh", None).await.unwrap(), None);
    let t = c.submit("gh", state, "tok-a").await.unwrap();
    assert_eq!((t.owner.as_str(), t.nonce), ("alice", ask.elicitation_id));
    assert_eq!(
        c.submit("gh", state, "tok-b").await.unwrap_err(),
        Refused::Used
    );
    assert_eq!(
        c.token("alice", "gh", None)
            .await
            .unwrap()
            .unwrap()
            .expose(),
        "tok-a"
    );
    assert_eq!(c.token("bob", "gh", None).await.unwrap(), None);
    assert_eq!(c.revoke("alice", None, None).await.unwrap().len(), 1);
    assert_eq!(c.token("alice", "gh", None).await.unwrap(), None);
}

#[tokio::test]
async fn a_waiting_call_wakes_when_the_page_stores_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let c = Arc::new(creds(dir.path()));
    let ask = c.ask("alice", "gh").unwrap();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            c.wait_connected("alice", "gh", Duration::from_secs(30))
                .await
        })
    };
    c.submit("gh", state_of(&ask.url), "tok").await.unwrap();
    let got = waiter.await.unwrap().unwrap().unwrap();
    assert_eq!(got.expose(), "tok");
}

#[test]
fn a_retry_state_answers_only_its_person_and_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let c = creds(dir.path());
    let ask = c.ask("alice", "gh").unwrap();
    let state = c.retry_state("alice", "gh", &ask).unwrap();
    assert!(c.is_retry_of(&state, "alice", "gh"));
    assert!(!c.is_retry_of(&state, "bob", "gh"));
    assert!(!c.is_retry_of(&state, "alice", "jira"));
    // The page's state is no retry state, and a retry state opens no page.
    let page = state_of(&ask.url);
    assert!(!c.is_retry_of(&format!("{RETRY_PREFIX}{page}"), "alice", "gh"));
    assert!(c.check_state(&state[RETRY_PREFIX.len()..], "gh").is_err());
}

#[tokio::test]
async fn credentials_stored_by_name_alone_go_to_the_one_kind_that_can_have_it_or_are_dropped() {
    use crate::policy::identity::IdentityKind;
    let dir = tempfile::tempdir().unwrap();
    let c = creds(dir.path());
    // As a version before identity keys stored them: the owner is a bare name.
    for (who, token) in [("alice", "tok-a"), ("ghost", "tok-g")] {
        let ask = c.ask(who, "gh").unwrap();
        c.submit("gh", state_of(&ask.url), token).await.unwrap();
    }
    let sole = |name: &str| (name == "alice").then_some(IdentityKind::ApiKey);
    assert_eq!(c.adopt_kinds(sole).await.unwrap(), (1, 1));
    let alice = c.token("api_key:alice", "gh", None).await.unwrap();
    assert_eq!(alice.map(|t| t.expose().to_owned()), Some("tok-a".into()));
    assert_eq!(c.token("alice", "gh", None).await.unwrap(), None);
    assert_eq!(c.token("ghost", "gh", None).await.unwrap(), None);
    let owners: Vec<String> = c
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|x| x.owner)
        .collect();
    assert_eq!(owners, ["api_key:alice"]);
    // Run again, nothing is left to migrate.
    assert_eq!(c.adopt_kinds(sole).await.unwrap(), (0, 0));
}
