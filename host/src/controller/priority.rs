//! Orders reconcile requests before a kube-runtime `Controller` takes them: a parent's own
//! changes first, its objects' changes and its requeues after.
//!
//! A controller with all its reconcile slots busy keeps every request that comes due in a hash
//! set and takes them in that set's order: at random. While 5,500 new Apps converged (bench,
//! 2026-12-07), 10.6 reconciles ran per App, most of them for a change of an App's Pods or
//! Deployment or to look again at a rollout in progress, and an App waiting for its first
//! reconcile (the one that writes its objects) waited behind them by chance.
//! controller-runtime 0.23 answers the same with its priority queue. Here, every request waits
//! in this queue, not in the controller's: it hands the controller at most twice as many as it
//! has slots ([`handed`]; each counted from its release until a reconcile of that parent
//! reports itself done), **urgent** ones (a parent created, its spec or finalizers changed,
//! its plugin swapped, its policy moved) before **routine** ones (the changes to its objects,
//! [`crate::controller::coalesce`]d, and its requeues: a resync, a look again at a rollout, a
//! retry after a failure), each level first come, first served. Once a routine request has
//! waited [`ROUTINE_MAX_WAIT`], routine and urgent requests take turns, so that neither level
//! can hold the other back for good.
//!
//! Requeues come here too ([`Handle::requeue`]): a reconcile hands kube-runtime
//! `Action::await_change()` and its wait to this queue, which keeps one timer per parent (the
//! earliest), dropped when the parent is handed over for any other reason, as kube-runtime's
//! scheduler does. So the controller runs only what this queue hands it, and its slots are
//! this queue's to count.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, VecDeque},
    time::Duration,
};

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::{family::Family, gauge::Gauge};
use tokio::{sync::mpsc, time::Instant};

/// How many requests a queue in front of a controller with `concurrency` reconcile slots may
/// have handed over at once (0: no bound): the slots' worth and as many again, which wait in
/// the controller's own scheduler. kube-runtime's scheduler holds a request it is handed until
/// its timer wheel's next millisecond (tokio-util's `DelayQueue` rounds a deadline up), so a
/// queue that handed over a request only once a slot came free left each slot idle for that
/// millisecond: bursts of no-op reconciles (a failover's, 0.2 ms each) ran at half speed
/// (bench, 2026-12-07-2054). The requests ahead wait in a hash set again, but never more than
/// the slots' worth, so their order does not reach far.
pub fn handed(concurrency: u16) -> usize {
    usize::from(concurrency) * 2
}

/// How long a routine request waits before it takes turns with urgent ones.
pub const ROUTINE_MAX_WAIT: Duration = Duration::from_secs(30);

/// How long a request handed to the controller holds its slot here at most without word that
/// its reconcile is done. A reconcile's API calls and plugin calls have deadlines of their
/// own; this only keeps a report that never comes (a bug) from shrinking the queue's slots for
/// good: past it, the controller is handed one request more than it has slots, which it holds.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// A parent, as both the controller's results and its failures name it.
type Key = (Option<String>, String);

/// How urgent a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Urgent,
    Routine,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Self::Urgent => "urgent",
            Self::Routine => "routine",
        }
    }
}

/// Requests waiting, by level, summed over every queue that shares it (the App controller's
/// and each bound kind's): `wasmop_reconcile_queued{priority}`.
#[derive(Clone, Default)]
pub struct Depth(Family<Vec<(&'static str, &'static str)>, Gauge>);

impl Depth {
    /// The gauges, to register.
    pub fn family(&self) -> Family<Vec<(&'static str, &'static str)>, Gauge> {
        self.0.clone()
    }

    fn add(&self, level: Level, by: i64) {
        self.0
            .get_or_create(&vec![("priority", level.label())])
            .inc_by(by);
    }
}

/// What the controller tells its queue.
enum Report<K: kube::Resource> {
    /// A reconcile of this parent finished (or the controller found no such parent).
    Done(Key),
    /// Reconcile this parent again after this long, unless something brings it sooner.
    After(ObjectRef<K>, Duration),
}

/// The controller's side of its queue: requeues and finished reconciles.
pub struct Handle<K: kube::Resource>(mpsc::UnboundedSender<Report<K>>);

impl<K: kube::Resource> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K: kube::Resource> Handle<K> {
    /// Reconcile `object` again after `after` (`None`: only when something changes).
    pub fn requeue(&self, object: ObjectRef<K>, after: Option<Duration>) {
        if let Some(after) = after {
            // The queue gone: the controller is stopping.
            let _ = self.0.send(Report::After(object, after));
        }
    }

    /// The reconcile of the parent `name` in `namespace` is done, freeing its slot.
    pub fn finished(&self, namespace: Option<&str>, name: &str) {
        let _ = self.0.send(Report::Done((
            namespace.map(str::to_string),
            name.to_string(),
        )));
    }

    /// Frees the slot of a request the controller dropped because its parent is gone: every
    /// result of the controller's `run` stream goes here. A reconcile that ran reports itself,
    /// as it ends ([`crate::controller::queued`]): from its own task, so that the controller
    /// finds the next request waiting when it frees the slot, rather than one poll later.
    pub fn result<E1, E2>(
        &self,
        result: &Result<
            (ObjectRef<K>, kube::runtime::controller::Action),
            kube::runtime::controller::Error<E1, E2>,
        >,
    ) where
        E1: std::error::Error + 'static,
        E2: std::error::Error + 'static,
    {
        if let Err(kube::runtime::controller::Error::ObjectNotFound(object)) = result {
            self.finished(object.namespace.as_deref(), &object.name);
        }
    }
}

/// Merges `urgent` and `routine` into one stream for `Controller::reconcile_on` that yields at
/// most `slots` requests whose reconciles are not reported done yet (0: no bound), in the order
/// the module describes. A parent asked for twice while it waits is yielded once, at the more
/// urgent level; a parent asked for while handed to the controller waits until that reconcile
/// is done (the controller would hold it too, and runs it again after). The stream ends once
/// both inputs have ended and nothing waits or is timed.
pub fn prioritize<K, U, R>(
    urgent: U,
    routine: R,
    slots: usize,
    depth: Depth,
) -> (impl Stream<Item = ObjectRef<K>> + Send, Handle<K>)
where
    K: kube::Resource + 'static,
    K::DynamicType: Clone + Send + Sync,
    U: Stream<Item = ObjectRef<K>> + Send + 'static,
    R: Stream<Item = ObjectRef<K>> + Send + 'static,
{
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let queue = Queue::new(slots, depth);
    let state = (
        queue,
        urgent.boxed().fuse(),
        routine.boxed().fuse(),
        report_rx,
    );
    let out = stream::unfold(
        state,
        |(mut queue, mut urgent, mut routine, mut reports)| async move {
            loop {
                let now = Instant::now();
                queue.fire_timers(now);
                if let Some(object) = queue.release(now) {
                    return Some((object, (queue, urgent, routine, reports)));
                }
                if urgent.is_done() && routine.is_done() && queue.is_empty() {
                    return None;
                }
                // Blocked on slots: the oldest release's timeout frees one too.
                let timeout = (!queue.waiting.is_empty())
                    .then(|| queue.oldest_release())
                    .flatten()
                    .map(|at| at + RELEASE_TIMEOUT);
                let wake = [timeout, queue.next_timer()].into_iter().flatten().min();
                tokio::select! {
                    // In this order: what arrives is queued before a freed slot takes the next
                    // request, so a burst of requests is ordered whole (and tests repeat).
                    biased;
                    Some(object) = urgent.next() => {
                        queue.push(object, Level::Urgent, Instant::now());
                    }
                    Some(object) = routine.next() => {
                        queue.push(object, Level::Routine, Instant::now());
                    }
                    Some(report) = reports.recv() => match report {
                        Report::Done(key) => queue.done(&key),
                        Report::After(object, after) => queue.time(object, Instant::now() + after),
                    },
                    () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
                    // Nothing can come any more, and nothing can free a slot: what waits is the
                    // controller's to drop, as it stops.
                    else => return None,
                }
            }
        },
    );
    (out, Handle(report_tx))
}

/// The requests waiting, those handed to the controller, and the timers.
struct Queue<K: kube::Resource> {
    /// Each waiting parent's request, level and entry (its place in its level's line).
    waiting: HashMap<Key, (ObjectRef<K>, Level, u64)>,
    /// Urgent entries in arrival order. An entry whose parent no longer waits under that entry
    /// (handed over, or promoted) is stale and dropped when met.
    urgent: VecDeque<(u64, Key)>,
    /// Routine entries with their arrival, in arrival order; likewise.
    routine: VecDeque<(Instant, u64, Key)>,
    /// The next entry's (or timer's) number.
    next: u64,
    /// Parents handed to the controller, with when.
    released: HashMap<Key, Instant>,
    /// Each timed parent's request, when it is due and its timer's number.
    timers: HashMap<Key, (ObjectRef<K>, Instant, u64)>,
    /// The timers by when they are due; an entry whose number is no longer its parent's timer
    /// is stale and dropped when met.
    due: BinaryHeap<Reverse<(Instant, u64, Key)>>,
    /// Whether an overdue routine request goes before the next urgent one.
    routine_turn: bool,
    slots: usize,
    depth: Depth,
}

impl<K: kube::Resource> Drop for Queue<K> {
    /// A queue that stops (its controller stopping, its kind unbound) takes its requests off
    /// the shared gauges.
    fn drop(&mut self) {
        for (_, level, _) in self.waiting.values() {
            self.depth.add(*level, -1);
        }
    }
}

impl<K: kube::Resource> Queue<K> {
    fn new(slots: usize, depth: Depth) -> Self {
        Self {
            waiting: HashMap::new(),
            urgent: VecDeque::new(),
            routine: VecDeque::new(),
            next: 0,
            released: HashMap::new(),
            timers: HashMap::new(),
            due: BinaryHeap::new(),
            routine_turn: false,
            slots: if slots == 0 { usize::MAX } else { slots },
            depth,
        }
    }

    fn push(&mut self, object: ObjectRef<K>, level: Level, now: Instant) {
        let key = (object.namespace.clone(), object.name.clone());
        let waits_at = self.waiting.get(&key).map(|(_, l, _)| *l);
        if waits_at == Some(Level::Urgent) || (waits_at.is_some() && level == Level::Routine) {
            return;
        }
        // New, or promoted from routine (its routine entry goes stale).
        if let Some(was) = waits_at {
            self.depth.add(was, -1);
        }
        self.depth.add(level, 1);
        let entry = self.next;
        self.next += 1;
        match level {
            Level::Urgent => self.urgent.push_back((entry, key.clone())),
            Level::Routine => self.routine.push_back((now, entry, key.clone())),
        }
        self.waiting.insert(key, (object, level, entry));
    }

    fn done(&mut self, key: &Key) {
        self.released.remove(key);
    }

    /// Times `object` for `at`, unless its timer is due sooner.
    fn time(&mut self, object: ObjectRef<K>, at: Instant) {
        let key = (object.namespace.clone(), object.name.clone());
        if self.timers.get(&key).is_some_and(|(_, due, _)| *due <= at) {
            return;
        }
        let number = self.next;
        self.next += 1;
        self.due.push(Reverse((at, number, key.clone())));
        self.timers.insert(key, (object, at, number));
    }

    /// Queues, as routine requests, the parents whose timers are due.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(Reverse((at, number, key))) = self.due.peek() {
            let live = self.timers.get(key).is_some_and(|(_, _, n)| n == number);
            if live && *at > now {
                break;
            }
            let Some(Reverse((_, _, key))) = self.due.pop() else {
                break;
            };
            if live && let Some((object, _, _)) = self.timers.remove(&key) {
                self.push(object, Level::Routine, now);
            }
        }
    }

    /// When the next live timer is due (stale ones ahead of it are dropped).
    fn next_timer(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, number, key))) = self.due.peek() {
            if self.timers.get(key).is_some_and(|(_, _, n)| n == number) {
                return Some(*at);
            }
            self.due.pop();
        }
        None
    }

    /// The next request to hand over, if a slot is free and one may go.
    fn release(&mut self, now: Instant) -> Option<ObjectRef<K>> {
        // A release never reported done stops holding its slot, and its parent may go again.
        self.released
            .retain(|_, at| now.duration_since(*at) < RELEASE_TIMEOUT);
        if self.released.len() >= self.slots {
            return None;
        }
        let overdue = if self.routine_turn {
            self.take_routine(|at| now.duration_since(at) >= ROUTINE_MAX_WAIT)
        } else {
            None
        };
        let key = match overdue {
            Some(key) => key,
            None => self.take_urgent().or_else(|| self.take_routine(|_| true))?,
        };
        let (object, level, _) = self.waiting.remove(&key)?;
        self.depth.add(level, -1);
        // After an urgent request, an overdue routine one may go next; after a routine one,
        // urgent ones go first again.
        self.routine_turn = level == Level::Urgent;
        // Handed over for whatever reason, its timer has done its work.
        self.timers.remove(&key);
        self.released.insert(key, now);
        Some(object)
    }

    fn is_live(&self, entry: u64, key: &Key) -> bool {
        self.waiting.get(key).is_some_and(|(_, _, e)| *e == entry)
    }

    /// The first urgent parent not with the controller. Stale entries met are dropped; the
    /// live ones skipped are parents with the controller, at most `slots` of them.
    fn take_urgent(&mut self) -> Option<Key> {
        let mut at = 0;
        while let Some((entry, key)) = self.urgent.get(at) {
            if !self.is_live(*entry, key) {
                self.urgent.remove(at);
            } else if self.released.contains_key(key) {
                at += 1;
            } else {
                return self.urgent.remove(at).map(|(_, key)| key);
            }
        }
        None
    }

    /// The first routine parent not with the controller, if `arrived` holds for its arrival.
    fn take_routine(&mut self, arrived: impl Fn(Instant) -> bool) -> Option<Key> {
        let mut at = 0;
        while let Some((since, entry, key)) = self.routine.get(at) {
            if !self.is_live(*entry, key) {
                self.routine.remove(at);
            } else if self.released.contains_key(key) {
                at += 1;
            } else if arrived(*since) {
                return self.routine.remove(at).map(|(_, _, key)| key);
            } else {
                // Later entries arrived later still.
                return None;
            }
        }
        None
    }

    /// Whether nothing waits and nothing is timed.
    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.timers.is_empty()
    }

    /// When the oldest request with the controller was handed over.
    fn oldest_release(&self) -> Option<Instant> {
        self.released.values().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::*;

    type Sender = mpsc::UnboundedSender<ObjectRef<ConfigMap>>;
    type Out = std::pin::Pin<Box<dyn Stream<Item = ObjectRef<ConfigMap>> + Send>>;

    /// A queue of `slots` fed by two channels, urgent and routine.
    fn queue(slots: usize) -> (Sender, Sender, Out, Handle<ConfigMap>) {
        let (urgent, urgent_rx) = mpsc::unbounded_channel();
        let (routine, routine_rx) = mpsc::unbounded_channel();
        let (out, done) = prioritize(
            UnboundedReceiverStream::new(urgent_rx),
            UnboundedReceiverStream::new(routine_rx),
            slots,
            Depth::default(),
        );
        (urgent, routine, Box::pin(out), done)
    }

    fn object(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("ns")
    }

    fn send(to: &Sender, name: &str) {
        to.send(object(name)).expect("the queue holds the receiver");
    }

    async fn next_name(out: &mut Out) -> Option<String> {
        tokio::time::timeout(Duration::from_secs(5), out.next())
            .await
            .ok()
            .flatten()
            .map(|o| o.name)
    }

    #[tokio::test(start_paused = true)]
    async fn a_parents_own_change_goes_before_its_objects_changes() {
        let (urgent, routine, mut out, done) = queue(1);
        send(&routine, "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        send(&routine, "b");
        send(&routine, "c");
        send(&urgent, "new");
        assert_eq!(next_name(&mut out).await, None, "the only slot is a's");
        done.finished(Some("ns"), "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("new"));
        done.finished(Some("ns"), "new");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"));
        done.finished(Some("ns"), "b");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("c"));
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_slots_are_with_the_controller() {
        let (urgent, _routine, mut out, done) = queue(2);
        for name in ["a", "b", "c", "d"] {
            send(&urgent, name);
        }
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"));
        assert_eq!(next_name(&mut out).await, None, "two slots, both taken");
        done.finished(Some("ns"), "b");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("c"));
        assert_eq!(next_name(&mut out).await, None);
        // A report for a parent not handed over frees nothing.
        done.finished(Some("ns"), "d");
        assert_eq!(next_name(&mut out).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_parent_with_the_controller_waits_until_its_reconcile_is_done() {
        let (urgent, routine, mut out, done) = queue(4);
        send(&urgent, "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        send(&routine, "a");
        send(&urgent, "a");
        assert_eq!(next_name(&mut out).await, None, "a is being reconciled");
        send(&routine, "b");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"));
        done.finished(Some("ns"), "a");
        assert_eq!(
            next_name(&mut out).await.as_deref(),
            Some("a"),
            "once more, for the changes during its reconcile"
        );
        done.finished(Some("ns"), "a");
        assert_eq!(next_name(&mut out).await, None, "and only once");
    }

    #[tokio::test(start_paused = true)]
    async fn requests_for_a_waiting_parent_are_one_at_the_more_urgent_level() {
        let (urgent, routine, mut out, done) = queue(1);
        send(&urgent, "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("x"));
        send(&routine, "a");
        send(&routine, "b");
        send(&routine, "a");
        send(&urgent, "b");
        send(&routine, "b");
        done.finished(Some("ns"), "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"), "promoted");
        done.finished(Some("ns"), "b");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        done.finished(Some("ns"), "a");
        assert_eq!(next_name(&mut out).await, None, "each once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_overdue_routine_request_goes_before_a_newer_urgent_one() {
        let (urgent, routine, mut out, done) = queue(1);
        send(&urgent, "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("x"));
        send(&routine, "old");
        // Read (and its arrival noted) while x holds the only slot.
        assert_eq!(next_name(&mut out).await, None);
        tokio::time::sleep(ROUTINE_MAX_WAIT).await;
        send(&urgent, "new");
        done.finished(Some("ns"), "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("old"));
        done.finished(Some("ns"), "old");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("new"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_routine_request_past_its_wait_takes_turns_with_urgent_ones() {
        let (urgent, routine, mut out, done) = queue(1);
        send(&urgent, "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("x"));
        send(&routine, "r1");
        send(&routine, "r2");
        assert_eq!(next_name(&mut out).await, None);
        tokio::time::sleep(ROUTINE_MAX_WAIT).await;
        send(&urgent, "u1");
        send(&urgent, "u2");
        let mut order = Vec::new();
        let mut last = "x".to_string();
        for _ in 0..4 {
            done.finished(Some("ns"), &last);
            last = next_name(&mut out).await.expect("one more");
            order.push(last.clone());
        }
        assert_eq!(order, ["r1", "u1", "r2", "u2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_comes_back_after_its_wait_unless_the_parent_went_sooner() {
        let (urgent, _routine, mut out, done) = queue(1);
        send(&urgent, "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        let start = Instant::now();
        done.requeue(object("a"), Some(Duration::from_secs(20)));
        // A later requeue does not push the earlier one back; no requeue is no timer.
        done.requeue(object("a"), Some(Duration::from_secs(300)));
        done.requeue(object("a"), None);
        done.finished(Some("ns"), "a");
        let again = out.next().await.map(|o| o.name);
        assert_eq!(again.as_deref(), Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(20));

        // Timed again, but a change hands it over first: the timer is spent.
        done.requeue(object("a"), Some(Duration::from_secs(20)));
        done.finished(Some("ns"), "a");
        send(&urgent, "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        done.finished(Some("ns"), "a");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            next_name(&mut out).await,
            None,
            "the timer went with the change"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_due_while_its_parent_is_with_the_controller_waits_for_it() {
        let (urgent, _routine, mut out, done) = queue(2);
        send(&urgent, "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        done.requeue(object("a"), Some(Duration::from_secs(1)));
        assert_eq!(
            next_name(&mut out).await,
            None,
            "a is still being reconciled"
        );
        done.finished(Some("ns"), "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_never_reported_done_frees_its_slot_after_the_timeout() {
        let (urgent, _routine, mut out, _done) = queue(1);
        send(&urgent, "lost");
        send(&urgent, "next");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("lost"));
        let start = Instant::now();
        let next = out.next().await.map(|o| o.name);
        assert_eq!(next.as_deref(), Some("next"));
        assert_eq!(start.elapsed(), RELEASE_TIMEOUT);
        send(&urgent, "lost");
        tokio::time::sleep(RELEASE_TIMEOUT).await;
        assert_eq!(
            next_name(&mut out).await.as_deref(),
            Some("lost"),
            "its parent may go again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_ends_once_its_inputs_have_and_nothing_waits() {
        let (urgent, routine, mut out, done) = queue(1);
        send(&urgent, "a");
        send(&routine, "b");
        drop((urgent, routine));
        assert_eq!(next_name(&mut out).await.as_deref(), Some("a"));
        done.finished(Some("ns"), "a");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"));
        done.finished(Some("ns"), "b");
        assert_eq!(out.next().await.map(|o| o.name), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_depth_gauges_count_what_waits_by_level() {
        let depth = Depth::default();
        let level = |name: &'static str| {
            depth
                .family()
                .get_or_create(&vec![("priority", name)])
                .get()
        };
        let (urgent, urgent_rx) = mpsc::unbounded_channel();
        let (routine, routine_rx) = mpsc::unbounded_channel();
        let (out, done) = prioritize(
            UnboundedReceiverStream::new(urgent_rx),
            UnboundedReceiverStream::new(routine_rx),
            1,
            depth.clone(),
        );
        let mut out: Out = Box::pin(out);
        send(&urgent, "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("x"));
        send(&routine, "a");
        send(&routine, "b");
        send(&urgent, "b");
        assert_eq!(next_name(&mut out).await, None);
        assert_eq!((level("urgent"), level("routine")), (1, 1), "b promoted");
        done.finished(Some("ns"), "x");
        assert_eq!(next_name(&mut out).await.as_deref(), Some("b"));
        assert_eq!((level("urgent"), level("routine")), (0, 1));
        drop(out);
        assert_eq!(
            (level("urgent"), level("routine")),
            (0, 0),
            "a stopped queue leaves nothing counted"
        );
    }

    #[test]
    fn a_controller_is_handed_its_slots_worth_ahead() {
        assert_eq!(handed(8), 16);
        assert_eq!(handed(0), 0, "no bound stays no bound");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_slots_mean_no_bound() {
        let (urgent, _routine, mut out, _done) = queue(0);
        for name in ["a", "b", "c"] {
            send(&urgent, name);
        }
        for name in ["a", "b", "c"] {
            assert_eq!(next_name(&mut out).await.as_deref(), Some(name));
        }
    }
}
