//! Circuit breakers (F8): one per upstream, and one per tool that needs one (`tool_breakers`).
//! Opens on N consecutive failures or a failure ratio over a window of recent calls; while open
//! it fails fast with the time until the next probe; after the cool-down it lets a few probe
//! calls through (half-open) and closes on success. What failed decides whose breaker counts
//! it: the transport and timeouts count against the upstream, a server's error answers against
//! the tool that gave them.

use std::{collections::VecDeque, time::Duration};

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;

/// Breaker settings (per upstream).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerConfig {
    pub consecutive_failures: u32,
    pub failure_ratio: f64,
    pub window: u32,
    pub min_calls: u32,
    #[serde(
        rename = "cooldown_ms",
        serialize_with = "crate::clock::serialize_millis"
    )]
    pub cooldown: Duration,
    pub half_open_probes: u32,
    /// Which outcomes count as failures (`count_is_error = true` adds `is_error`).
    pub count: Vec<FailureClass>,
}

/// What kind of bad outcome a call had, for deciding whether it says the upstream is unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The connection or process failed: closed mid-call, unreachable, broken pipe.
    Transport,
    /// No answer within the deadline.
    Timeout,
    /// A JSON-RPC internal or server error (-32603, -32000 to -32099).
    ServerError,
    /// Any other JSON-RPC error (invalid params, method not found, an application's code): the
    /// upstream answered, the request was at fault.
    ClientError,
    /// A tool result with `isError: true`: the tool's own refusal.
    IsError,
}

/// What counts unless `count` says otherwise: the transport and timeouts (against the
/// upstream), and a server's internal errors (against the tool that gave them, so one broken
/// tool does not lock its neighbours for every client).
pub const DEFAULT_FAILURE_CLASSES: [FailureClass; 3] = [
    FailureClass::Transport,
    FailureClass::Timeout,
    FailureClass::ServerError,
];

/// Whose breaker a failure class counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The connection itself failed: every tool of the upstream would.
    Upstream,
    /// The upstream answered: this tool is at fault.
    Tool,
}

impl FailureClass {
    pub fn scope(self) -> Scope {
        match self {
            FailureClass::Transport | FailureClass::Timeout => Scope::Upstream,
            FailureClass::ServerError | FailureClass::ClientError | FailureClass::IsError => {
                Scope::Tool
            }
        }
    }
}

/// How a call through the breaker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
    /// Neither (e.g. the client cancelled): releases a probe slot, changes nothing else.
    Neutral,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { in_flight: u32 },
}

#[derive(Debug)]
struct Inner {
    state: State,
    consecutive: u32,
    /// Recent outcomes, `true` = failure.
    recent: VecDeque<bool>,
    opened: u64,
}

/// What `/readyz` shows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BreakerStatus {
    pub state: &'static str,
    /// While open: milliseconds until the next probe is allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
    pub consecutive_failures: u32,
    pub times_opened: u64,
}

#[derive(Debug)]
pub struct Breaker {
    cfg: BreakerConfig,
    inner: Mutex<Inner>,
}

impl Breaker {
    pub fn new(cfg: BreakerConfig) -> Self {
        Self {
            cfg,
            inner: Mutex::new(Inner {
                state: State::Closed,
                consecutive: 0,
                recent: VecDeque::new(),
                opened: 0,
            }),
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// Lets a call through, or says how long until the breaker will try again.
    pub fn admit(&self, now: Instant) -> Result<(), Duration> {
        let mut s = self.inner.lock();
        match s.state {
            State::Closed => Ok(()),
            State::Open { until } if now < until => Err(until - now),
            State::Open { .. } => {
                s.state = State::HalfOpen { in_flight: 1 };
                Ok(())
            }
            State::HalfOpen { in_flight } if in_flight < self.cfg.half_open_probes => {
                s.state = State::HalfOpen {
                    in_flight: in_flight + 1,
                };
                Ok(())
            }
            // Probes are out; the next decision comes with their outcome.
            State::HalfOpen { .. } => Err(Duration::ZERO),
        }
    }

    pub fn record(&self, now: Instant, outcome: Outcome) {
        let mut s = self.inner.lock();
        if let State::HalfOpen { in_flight } = s.state {
            match outcome {
                Outcome::Success => {
                    s.state = State::Closed;
                    s.consecutive = 0;
                    s.recent.clear();
                }
                Outcome::Failure => self.open(&mut s, now),
                Outcome::Neutral => {
                    s.state = State::HalfOpen {
                        in_flight: in_flight.saturating_sub(1),
                    }
                }
            }
            return;
        }
        let failed = match outcome {
            Outcome::Success => false,
            Outcome::Failure => true,
            Outcome::Neutral => return,
        };
        s.consecutive = if failed { s.consecutive + 1 } else { 0 };
        s.recent.push_back(failed);
        while s.recent.len() > self.cfg.window as usize {
            s.recent.pop_front();
        }
        let failures = s.recent.iter().filter(|f| **f).count();
        let ratio_tripped = s.recent.len() >= self.cfg.min_calls as usize
            && failures as f64 / s.recent.len() as f64 >= self.cfg.failure_ratio;
        if matches!(s.state, State::Closed)
            && (s.consecutive >= self.cfg.consecutive_failures || ratio_tripped)
        {
            self.open(&mut s, now);
        }
    }

    fn open(&self, s: &mut Inner, now: Instant) {
        s.state = State::Open {
            until: now + self.cfg.cooldown,
        };
        s.opened += 1;
        s.recent.clear();
    }

    /// Closes the breaker (operator override from the admin API).
    pub fn reset(&self) {
        let mut s = self.inner.lock();
        s.state = State::Closed;
        s.consecutive = 0;
        s.recent.clear();
    }

    pub fn status(&self, now: Instant) -> BreakerStatus {
        let s = self.inner.lock();
        let (state, retry_in_ms) = match s.state {
            State::Closed => ("closed", None),
            State::Open { until } => (
                "open",
                Some(
                    u64::try_from(until.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX),
                ),
            ),
            State::HalfOpen { .. } => ("half_open", None),
        };
        BreakerStatus {
            state,
            retry_in_ms,
            consecutive_failures: s.consecutive,
            times_opened: s.opened,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: 3,
            failure_ratio: 0.5,
            window: 10,
            min_calls: 6,
            cooldown: Duration::from_secs(10),
            half_open_probes: 1,
            count: DEFAULT_FAILURE_CLASSES.to_vec(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_fails_fast_half_opens_and_closes() {
        let b = Breaker::new(cfg());
        for _ in 0..3 {
            b.admit(Instant::now()).unwrap();
            b.record(Instant::now(), Outcome::Failure);
        }
        let wait = b.admit(Instant::now()).unwrap_err();
        assert_eq!(wait, Duration::from_secs(10));
        assert_eq!(b.status(Instant::now()).state, "open");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(b.admit(Instant::now()).unwrap_err(), Duration::from_secs(6));
        tokio::time::advance(Duration::from_secs(6)).await;
        b.admit(Instant::now())
            .expect("a probe after the cool-down");
        assert_eq!(b.status(Instant::now()).state, "half_open");
        assert!(b.admit(Instant::now()).is_err(), "one probe at a time");
        b.record(Instant::now(), Outcome::Success);
        assert_eq!(b.status(Instant::now()).state, "closed");
        assert!(b.admit(Instant::now()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens() {
        let b = Breaker::new(cfg());
        for _ in 0..3 {
            b.record(Instant::now(), Outcome::Failure);
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        b.admit(Instant::now()).unwrap();
        b.record(Instant::now(), Outcome::Failure);
        assert_eq!(
            b.admit(Instant::now()).unwrap_err(),
            Duration::from_secs(10)
        );
        assert_eq!(b.status(Instant::now()).times_opened, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn ratio_over_the_window_opens_without_a_streak() {
        let b = Breaker::new(cfg());
        // ok, fail, ok, fail, ok: 2 of 5 failed, and 5 calls are below min_calls.
        for i in 0..5 {
            let outcome = if i % 2 == 1 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            b.record(Instant::now(), outcome);
            assert!(
                b.admit(Instant::now()).is_ok(),
                "still closed after call {i}"
            );
        }
        // A sixth call failing makes 3 of 6 = 0.5 with a streak of only one.
        b.record(Instant::now(), Outcome::Failure);
        assert_eq!(b.status(Instant::now()).state, "open");
    }

    #[tokio::test(start_paused = true)]
    async fn neutral_outcomes_change_nothing() {
        let b = Breaker::new(cfg());
        b.record(Instant::now(), Outcome::Failure);
        b.record(Instant::now(), Outcome::Failure);
        b.record(Instant::now(), Outcome::Neutral);
        b.record(Instant::now(), Outcome::Failure);
        assert!(
            b.admit(Instant::now()).is_err(),
            "the streak survives a neutral outcome"
        );
    }
}
