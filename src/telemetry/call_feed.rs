//! The call feed behind the operator console: every finished call as its audit record (never
//! the arguments), kept in a bounded ring for the page's first look and broadcast to its live
//! streams, plus per-upstream and per-tool latency windows for its charts. The windows use the
//! call histogram's buckets, so a deployment without Prometheus still gets p50/p99 pictures.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{audit::Record, metrics::DURATION_BUCKETS};

/// Finished calls the feed keeps for a page that opens (and for `GET /admin/calls/SEQ`).
pub const RECENT_CALLS: usize = 1000;
/// Finished calls a slow live stream may fall behind before it skips (and says so).
const LIVE_BACKLOG: usize = 1024;
/// Width of one latency window slot.
pub const SLOT_SECS: i64 = 10;
/// Slots kept: ten minutes.
const SLOTS: usize = 60;

/// One finished call, as the console shows it.
#[derive(Debug, Clone, Serialize)]
pub struct FeedEntry {
    /// Increases by one per call; the live stream's event id.
    pub seq: u64,
    pub time_ms: i64,
    #[serde(flatten)]
    pub record: Record,
    /// The plan envelope's status, when the answer carried one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<String>,
    /// The call's trace id, when tracing is on (it is also the correlation id then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What `observe` knows about a finished call besides its record.
#[derive(Debug)]
pub struct Finished<'a> {
    pub upstream_label: &'a str,
    pub tool_label: &'a str,
    pub latency_s: f64,
    pub envelope: Option<String>,
    pub traced: bool,
}

/// The feed; cheap to clone.
#[derive(Debug, Clone)]
pub struct CallFeed(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    live: broadcast::Sender<Arc<FeedEntry>>,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    recent: VecDeque<Arc<FeedEntry>>,
    /// By upstream label, then tool label.
    windows: HashMap<String, HashMap<String, Window>>,
}

impl Default for CallFeed {
    fn default() -> Self {
        Self(Arc::new(Inner {
            state: Mutex::new(State {
                next_seq: 1,
                ..State::default()
            }),
            live: broadcast::channel(LIVE_BACKLOG).0,
        }))
    }
}

impl CallFeed {
    /// Records one finished call. `record.arguments` is dropped: the console never shows them.
    pub fn push(&self, mut record: Record, f: Finished<'_>) {
        record.arguments = None;
        let time_ms = chrono::Utc::now().timestamp_millis();
        let failed = !matches!(
            record.outcome,
            "ok" | "input_required" | "approval_required"
        );
        let trace_id = f.traced.then(|| record.correlation_id.clone());
        let mut state = self.0.state.lock();
        let entry = Arc::new(FeedEntry {
            seq: state.next_seq,
            time_ms,
            record,
            envelope: f.envelope,
            trace_id,
        });
        state.next_seq += 1;
        if state.recent.len() == RECENT_CALLS {
            state.recent.pop_front();
        }
        state.recent.push_back(entry.clone());
        // Keys are copied only the first time a tool is seen.
        let tools = match state.windows.get_mut(f.upstream_label) {
            Some(t) => t,
            None => state
                .windows
                .entry(f.upstream_label.to_owned())
                .or_default(),
        };
        let window = match tools.get_mut(f.tool_label) {
            Some(w) => w,
            None => tools.entry(f.tool_label.to_owned()).or_default(),
        };
        window.record(time_ms / 1000 / SLOT_SECS, f.latency_s, failed);
        // Under the lock: a stream that subscribes sees each call once, in the backlog or live.
        let _ = self.0.live.send(entry);
    }

    /// The newest calls, newest first, that `keep` accepts.
    pub fn recent(&self, limit: usize, keep: impl Fn(&FeedEntry) -> bool) -> Vec<Arc<FeedEntry>> {
        let state = self.0.state.lock();
        state
            .recent
            .iter()
            .rev()
            .filter(|e| keep(e))
            .take(limit)
            .cloned()
            .collect()
    }

    /// One call, while the feed still holds it.
    pub fn get(&self, seq: u64) -> Option<Arc<FeedEntry>> {
        let state = self.0.state.lock();
        let first = state.recent.front()?.seq;
        let i = usize::try_from(seq.checked_sub(first)?).ok()?;
        state.recent.get(i).filter(|e| e.seq == seq).cloned()
    }

    /// The calls after `after` that the feed still holds (oldest first), and the live calls
    /// from then on: none is missed and none comes twice.
    pub fn follow(&self, after: u64) -> (Vec<Arc<FeedEntry>>, broadcast::Receiver<Arc<FeedEntry>>) {
        let state = self.0.state.lock();
        let rx = self.0.live.subscribe();
        let backlog = state
            .recent
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        (backlog, rx)
    }

    /// Latency and errors per upstream and per tool over the last ten minutes, one point per
    /// slot (oldest first), and over the whole window.
    pub fn latency(&self) -> Value {
        let now = chrono::Utc::now().timestamp_millis() / 1000 / SLOT_SECS;
        let oldest = now - SLOTS as i64 + 1;
        let mut state = self.0.state.lock();
        for tools in state.windows.values_mut() {
            tools.retain(|_, w| w.newest() >= oldest);
        }
        state.windows.retain(|_, tools| !tools.is_empty());
        let mut per_upstream: HashMap<&str, Window> = HashMap::new();
        let mut tools = Vec::new();
        for (upstream, by_tool) in &state.windows {
            for (tool, w) in by_tool {
                per_upstream.entry(upstream.as_str()).or_default().merge(w);
                tools.push(json!({"upstream": upstream, "tool": tool,
                                  "total": w.summary(oldest, now), "points": w.points(oldest, now)}));
            }
        }
        let mut upstreams: Vec<Value> = per_upstream
            .iter()
            .map(|(u, w)| json!({"upstream": u, "total": w.summary(oldest, now), "points": w.points(oldest, now)}))
            .collect();
        upstreams.sort_by(|a, b| a["upstream"].as_str().cmp(&b["upstream"].as_str()));
        tools.sort_by(|a, b| {
            (a["upstream"].as_str(), a["tool"].as_str())
                .cmp(&(b["upstream"].as_str(), b["tool"].as_str()))
        });
        json!({"slot_secs": SLOT_SECS, "slots": SLOTS, "first_slot_ms": oldest * SLOT_SECS * 1000,
               "upstreams": upstreams, "tools": tools})
    }
}

/// Counts per latency bucket (the histogram's, plus one above its last bound).
type Buckets = [u32; DURATION_BUCKETS.len() + 1];

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    epoch: i64,
    calls: u32,
    errors: u32,
    buckets: Buckets,
}

impl Slot {
    fn add(&mut self, other: &Slot) {
        self.calls += other.calls;
        self.errors += other.errors;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    fn quantile_ms(&self, q: f64) -> Option<f64> {
        quantile(&self.buckets, q).map(|s| (s * 1000.0 * 100.0).round() / 100.0)
    }
}

/// A ring of slots, indexed by epoch (slot number since 1970).
#[derive(Debug, Clone)]
struct Window([Slot; SLOTS]);

impl Default for Window {
    fn default() -> Self {
        Self([Slot::default(); SLOTS])
    }
}

impl Window {
    fn slot(&mut self, epoch: i64) -> &mut Slot {
        let slot = &mut self.0[epoch.rem_euclid(SLOTS as i64) as usize];
        if slot.epoch != epoch {
            *slot = Slot {
                epoch,
                ..Slot::default()
            };
        }
        slot
    }

    fn record(&mut self, epoch: i64, latency_s: f64, failed: bool) {
        let slot = self.slot(epoch);
        slot.calls += 1;
        slot.errors += u32::from(failed);
        let i = DURATION_BUCKETS
            .iter()
            .position(|b| latency_s <= *b)
            .unwrap_or(DURATION_BUCKETS.len());
        slot.buckets[i] += 1;
    }

    fn merge(&mut self, other: &Window) {
        for s in other.0.iter().filter(|s| s.calls > 0) {
            let epoch = s.epoch;
            self.slot(epoch).add(s);
        }
    }

    fn newest(&self) -> i64 {
        self.0
            .iter()
            .filter(|s| s.calls > 0)
            .map(|s| s.epoch)
            .max()
            .unwrap_or(i64::MIN)
    }

    fn at(&self, epoch: i64) -> Option<&Slot> {
        let slot = &self.0[epoch.rem_euclid(SLOTS as i64) as usize];
        (slot.epoch == epoch && slot.calls > 0).then_some(slot)
    }

    fn points(&self, oldest: i64, now: i64) -> Vec<Value> {
        (oldest..=now)
            .map(|e| match self.at(e) {
                Some(s) => json!({"calls": s.calls, "errors": s.errors,
                                  "p50_ms": s.quantile_ms(0.5), "p99_ms": s.quantile_ms(0.99)}),
                None => json!({"calls": 0, "errors": 0}),
            })
            .collect()
    }

    fn summary(&self, oldest: i64, now: i64) -> Value {
        let mut all = Slot::default();
        for e in oldest..=now {
            if let Some(s) = self.at(e) {
                all.add(s);
            }
        }
        json!({"calls": all.calls, "errors": all.errors,
               "error_rate": if all.calls == 0 { 0.0 } else { f64::from(all.errors) / f64::from(all.calls) },
               "p50_ms": all.quantile_ms(0.5), "p99_ms": all.quantile_ms(0.99)})
    }
}

/// The `q` quantile in seconds, interpolated inside its bucket as Prometheus'
/// `histogram_quantile` does; the last bound for calls above it.
fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut seen = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        let before = seen;
        seen += u64::from(count);
        if (seen as f64) >= rank && count > 0 {
            let Some(&upper) = DURATION_BUCKETS.get(i) else {
                return DURATION_BUCKETS.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { DURATION_BUCKETS[i - 1] };
            let inside = (rank - before as f64) / f64::from(count);
            return Some(lower + (upper - lower) * inside.clamp(0.0, 1.0));
        }
    }
    DURATION_BUCKETS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_follow_the_buckets() {
        let mut b: Buckets = Default::default();
        // 99 calls of at most 1 ms, one of about 2 s.
        b[1] = 99;
        b[11] = 1;
        let p50 = quantile(&b, 0.5).unwrap();
        assert!(p50 > 0.0005 && p50 <= 0.001, "{p50}");
        let p99 = quantile(&b, 0.99).unwrap();
        assert!(p99 <= 0.001, "{p99}");
        let p999 = quantile(&b, 0.999).unwrap();
        assert!(p999 > 1.0 && p999 <= 2.5, "{p999}");
        assert_eq!(quantile(&Default::default(), 0.5), None);
    }

    #[test]
    fn slots_roll_over() {
        let mut w = Window::default();
        w.record(100, 0.002, false);
        w.record(100, 0.002, true);
        w.record(100 + SLOTS as i64, 0.002, false);
        // The old slot was reused for the new epoch.
        assert!(w.at(100).is_none());
        assert_eq!(w.at(100 + SLOTS as i64).map(|s| s.calls), Some(1));
    }
}
