//! Flow definitions several test files run.

/// Two writes through `ledger.record`, the second of which meets `inputs.signal` (so a test
/// knows it reached the upstream) and then waits 30 s; then an echo of both.
pub const WRITES: &str = r#"
id = "writes"
[inputs]
type = "object"
required = ["signal"]
properties = { signal = { type = "string" } }
[[nodes]]
id = "first"
tool = "ledger.record"
params = { value = 1 }
[[nodes]]
id = "second"
tool = "ledger.record"
depends_on = ["first"]
params = { value = 2, signal = "{{inputs.signal}}", ms = 30000 }
[[nodes]]
id = "done"
tool = "ledger.echo"
depends_on = ["second"]
params = { text = "wrote {{first.output.recorded}} and {{second.output.recorded}}" }
[outputs]
said = "{{done.output}}"
"#;
