//! Coalesces reconcile requests that come from changes to the objects an App owns.
//!
//! A new App's Deployment alone changes five or six times on its way to ready (created, its
//! ReplicaSet's progress, each Pod scheduled, started, ready), and each change used to be a
//! reconcile of the App: 9.5 reconciles per App while 1,000 Apps converged (bench, 2026-12-06).
//! Here, the first change to an App's objects opens a window of fixed length; the changes that
//! follow within it join it, and the App is reconciled once when it closes. The window is never
//! extended: unlike a trailing-edge debounce (kube-runtime's `debounce`, which applies to
//! every trigger), nobody writing objects can hold an App off for longer than one window. App
//! edits and plugin swaps do not come through here and stay immediate.

use std::{
    collections::{HashSet, VecDeque},
    hash::Hash,
    time::Duration,
};

use futures::{Stream, StreamExt, stream};
use tokio::time::Instant;

/// Yields each item of `input` once, `window` after its first arrival, however often it
/// arrives in between; items come out in the order they first arrived. A zero window passes
/// items straight through.
pub fn coalesce<S, T>(input: S, window: Duration) -> impl Stream<Item = T> + Send
where
    S: Stream<Item = T> + Unpin + Send,
    T: Eq + Hash + Clone + Send,
{
    struct State<S, T> {
        input: S,
        /// Every window opens `window` before it closes, so closing times are in arrival
        /// order and a queue keeps them sorted.
        open: VecDeque<(Instant, T)>,
        waiting: HashSet<T>,
        input_done: bool,
    }
    let state = State {
        input,
        open: VecDeque::new(),
        waiting: HashSet::new(),
        input_done: false,
    };
    stream::unfold(state, move |mut st| async move {
        loop {
            let closes = st.open.front().map(|(at, _)| *at);
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(closes.unwrap_or_else(Instant::now)), if closes.is_some() => {
                    let (_, item) = st.open.pop_front()?;
                    st.waiting.remove(&item);
                    return Some((item, st));
                }
                next = st.input.next(), if !st.input_done => match next {
                    Some(item) if window.is_zero() => return Some((item, st)),
                    Some(item) => {
                        if st.waiting.insert(item.clone()) {
                            st.open.push_back((Instant::now() + window, item));
                        }
                    }
                    None => st.input_done = true,
                },
                else => return None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::*;

    const WINDOW: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_item_a_window_after_its_first_arrival() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Box::pin(coalesce(UnboundedReceiverStream::new(rx), WINDOW));
        let start = Instant::now();
        for item in ["a", "b", "a", "a", "b"] {
            tx.send(item).expect("the stream holds the receiver");
        }
        assert_eq!(out.next().await, Some("a"));
        assert_eq!(start.elapsed(), WINDOW);
        assert_eq!(out.next().await, Some("b"));
        assert_eq!(start.elapsed(), WINDOW, "b's window opened with a's");
        drop(tx);
        assert_eq!(out.next().await, None, "nothing more, and the stream ends");
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_writer_cannot_hold_an_item_off_past_one_window() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Box::pin(coalesce(UnboundedReceiverStream::new(rx), WINDOW));
        let start = Instant::now();
        let writer = tokio::spawn(async move {
            // A change every 100 ms for 3 s: a trailing-edge debounce would never fire.
            for _ in 0..30 {
                tx.send("a").expect("the stream holds the receiver");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut fired = Vec::new();
        while let Some(item) = out.next().await {
            fired.push((item, start.elapsed()));
        }
        writer.await.expect("the writer ran");
        assert_eq!(
            fired.first().map(|f| f.1),
            Some(WINDOW),
            "the first window closes on time"
        );
        // 3 s of changes: three windows, and a fourth opened by the changes at 3.0 s's edge.
        assert!((3..=4).contains(&fired.len()), "{fired:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_arriving_after_its_window_closed_opens_a_new_one() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Box::pin(coalesce(UnboundedReceiverStream::new(rx), WINDOW));
        tx.send(1).expect("the stream holds the receiver");
        assert_eq!(out.next().await, Some(1));
        tx.send(1).expect("the stream holds the receiver");
        let again = Instant::now();
        assert_eq!(out.next().await, Some(1));
        assert_eq!(again.elapsed(), WINDOW);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_window_passes_items_through() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Box::pin(coalesce(UnboundedReceiverStream::new(rx), Duration::ZERO));
        let start = Instant::now();
        tx.send(1).expect("the stream holds the receiver");
        tx.send(1).expect("the stream holds the receiver");
        assert_eq!(out.next().await, Some(1));
        assert_eq!(out.next().await, Some(1));
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
