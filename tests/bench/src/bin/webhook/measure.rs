//! The two measurements, every variant of one interleaved with the others request by request
//! (the order rotating each round), so that drift in the shared machine and API server falls on
//! all alike. Every answer is checked (admitted, refused in the plugin's words, converted) after
//! its time is taken, and the host's own `/metrics` say how many reviews it answered and in
//! what time: the admitted and refused creates must each have been one review, and each read
//! is counted with the conversions it caused.

use std::time::Instant;

use anyhow::{Context, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, PostParams},
};
use serde_json::json;

use crate::setup::{HostProcess, Names, wait_for};

/// The name the plugin refuses: it also names the instance's Service, which must be a DNS-1035
/// label (no leading digit).
pub const REFUSED_NAME: &str = "9lives";

/// Creates in flight at once while making the objects the LISTs read.
const CREATE_CONCURRENCY: usize = 8;

/// Rounds of LISTs before the timed ones.
const LIST_WARMUP: usize = 3;

/// Percentiles and mean of a set of times, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// How many.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

impl Stats {
    /// Of `samples` (ms), nearest-rank percentiles.
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| -> f64 {
            if sorted.is_empty() {
                return f64::NAN;
            }
            let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[i]
        };
        Self {
            n: sorted.len(),
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }
}

/// What the host's `/metrics` say it answered for one webhook over a measurement.
#[derive(Debug, Clone, Copy)]
pub struct HostSide {
    /// Reviews answered (`wasmop_webhook_requests_total`).
    pub reviews: f64,
    /// Mean time to answer one, ms (`wasmop_webhook_duration_seconds`).
    pub mean_ms: f64,
}

/// The counters of webhook `webhook` (`validate`, `convert`) in a `/metrics` text: reviews and
/// seconds spent, summed over bindings and results.
fn webhook_totals(metrics: &str, webhook: &str) -> (f64, f64) {
    let label = format!("webhook=\"{webhook}\"");
    let sum = |name: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| series.split('{').next() == Some(name) && series.contains(&label))
            .filter_map(|(_, v)| v.parse::<f64>().ok())
            .sum()
    };
    (
        sum("wasmop_webhook_requests_total"),
        sum("wasmop_webhook_duration_seconds_sum"),
    )
}

/// Reads the host's totals of `webhook` at the start of a measurement; [`HostTotals::since`]
/// gives what it answered since.
struct HostTotals<'a> {
    host: &'a HostProcess,
    webhook: &'static str,
    start: (f64, f64),
}

impl<'a> HostTotals<'a> {
    async fn start(host: &'a HostProcess, webhook: &'static str) -> anyhow::Result<Self> {
        Ok(Self {
            host,
            webhook,
            start: webhook_totals(&host.metrics().await?, webhook),
        })
    }

    async fn since(&self) -> anyhow::Result<HostSide> {
        let (reviews, seconds) = webhook_totals(&self.host.metrics().await?, self.webhook);
        let reviews = reviews - self.start.0;
        Ok(HostSide {
            reviews,
            mean_ms: (seconds - self.start.1) * 1e3 / reviews,
        })
    }
}

/// Dry-run creates, side by side.
#[derive(Debug)]
pub struct Admission {
    /// The plain kind: no webhook.
    pub plain: Stats,
    /// The bound kind, a name the plugin admits.
    pub allowed: Stats,
    /// The bound kind, [`REFUSED_NAME`]: refused by the plugin.
    pub refused: Stats,
    /// Validate reviews the host answered over the timed creates (2 N).
    pub host: HostSide,
}

/// One variant of the dry-run creates.
#[derive(Clone, Copy)]
enum Create {
    Plain,
    Allowed,
    Refused,
}

/// `n` rounds of three server-side dry-run creates (after `warmup` untimed ones): a `Greeting`
/// of the plain kind, one of the bound kind that the plugin admits, one it refuses.
pub async fn admission(
    names: &Names,
    client: &Client,
    host: &HostProcess,
    n: usize,
    warmup: usize,
) -> anyhow::Result<Admission> {
    let plain = names.greetings(client, &names.plain_group, "v1");
    let hooked = names.greetings(client, &names.hooked_group, "v1");
    let object = |api: &Api<DynamicObject>, group: &str, name: &str| -> anyhow::Result<_> {
        Ok((api.clone(), greeting(names, group, "v1", name)?))
    };
    let variants = [
        (
            Create::Plain,
            object(&plain, &names.plain_group, "bench-dry")?,
        ),
        (
            Create::Allowed,
            object(&hooked, &names.hooked_group, "bench-dry")?,
        ),
        (
            Create::Refused,
            object(&hooked, &names.hooked_group, REFUSED_NAME)?,
        ),
    ];
    // The API server picks up a new configuration from its informer: refused once it has.
    let (api, refused) = &variants[2].1;
    wait_for("the API server to call the webhook", || async {
        Ok(dry_create(api, refused, Create::Refused).await.ok())
    })
    .await?;
    for _ in 0..warmup {
        for (variant, (api, object)) in &variants {
            dry_create(api, object, *variant).await?;
        }
    }

    let totals = HostTotals::start(host, "validate").await?;
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..n {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let (variant, (api, object)) = &variants[i];
            times[i].push(
                dry_create(api, object, *variant)
                    .await
                    .with_context(|| format!("dry-run create {round}"))?,
            );
        }
    }
    let host_side = totals.since().await?;
    ensure!(
        host_side.reviews == (2 * n) as f64,
        "the host answered {} validate reviews for {} creates of the bound kind",
        host_side.reviews,
        2 * n
    );
    Ok(Admission {
        plain: Stats::of(&times[0]),
        allowed: Stats::of(&times[1]),
        refused: Stats::of(&times[2]),
        host: host_side,
    })
}

/// A `Greeting` of `group` at `version`, named `name`, in the run's namespace.
fn greeting(
    names: &Names,
    group: &str,
    version: &str,
    name: &str,
) -> anyhow::Result<DynamicObject> {
    let text = if version == "v1" { "message" } else { "text" };
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{group}/{version}"), "kind": "Greeting",
        "metadata": {"name": name, "namespace": names.namespace},
        "spec": {"version": "1.0.0", text: "hi", "replicas": 1},
    }))?)
}

/// One server-side dry-run create of `object`, in ms; an error unless it was admitted
/// ([`Create::Plain`], [`Create::Allowed`]) or refused in the plugin's words
/// ([`Create::Refused`]).
async fn dry_create(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    variant: Create,
) -> anyhow::Result<f64> {
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    let result = api.create(&params, object).await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match (variant, result) {
        (Create::Plain | Create::Allowed, Ok(_)) => Ok(ms),
        (Create::Refused, Err(kube::Error::Api(status)))
            if status.message.contains("denied the request")
                && status.message.contains("DNS-1035") =>
        {
            Ok(ms)
        }
        (Create::Refused, Ok(_)) => bail!("{REFUSED_NAME} was admitted"),
        (_, Err(err)) => Err(err).context("a dry-run create"),
    }
}

/// One kind of read, timed, with the convert reviews the host answered meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    /// The reads' times.
    pub stats: Stats,
    /// Convert reviews the host answered per read (read before and after each, untimed).
    pub reviews_per_read: f64,
    /// Mean time the host took to answer one of those reviews, ms (`NaN` when none).
    pub host_ms_per_review: f64,
}

/// Reads of the M instances of the bound kind at its two versions, side by side.
#[derive(Debug)]
pub struct Conversion {
    /// Seconds from the first create until all M instances of the bound kind were Ready.
    pub ready_s: f64,
    /// Convert reviews the host answered from the first create until all were Ready: the API
    /// server converts every write of an instance for its watch cache of each other version.
    pub writes: HostSide,
    /// LIST of the bound kind at `v1`, its storage version.
    pub list_v1: Read,
    /// LIST of the bound kind at `v1alpha1`.
    pub list_v1alpha1: Read,
    /// GET of one instance of the bound kind at `v1`.
    pub get_v1: Read,
    /// GET of one instance of the bound kind at `v1alpha1`.
    pub get_v1alpha1: Read,
}

/// One variant of the reads: what is read, and the field of `spec` each object read must hold
/// (`text` only if the plugin converted it).
#[derive(Clone, Copy)]
enum Reading {
    List(&'static str),
    Get(&'static str),
}

/// Times and reviews of one variant, gathered over the rounds.
#[derive(Default)]
struct Tally {
    times: Vec<f64>,
    reviews: f64,
    host_seconds: f64,
}

impl Tally {
    fn read(&self) -> Read {
        Read {
            stats: Stats::of(&self.times),
            reviews_per_read: self.reviews / self.times.len() as f64,
            host_ms_per_review: self.host_seconds * 1e3 / self.reviews,
        }
    }
}

/// `m` instances of the bound kind created as `v1` and served by the host until Ready; then `r`
/// rounds, each of two LISTs of the namespace (at `v1` and at `v1alpha1`) and a GET of every
/// instance at `v1` and at `v1alpha1`, the order rotating.
pub async fn conversion(
    names: &Names,
    client: &Client,
    host: &HostProcess,
    m: usize,
    r: usize,
) -> anyhow::Result<Conversion> {
    let started = Instant::now();
    let before = webhook_totals(&host.metrics().await?, "convert");
    let hooked = names.greetings(client, &names.hooked_group, "v1");
    futures::stream::iter(0..m)
        .map(|i| {
            let api = hooked.clone();
            async move {
                let object = greeting(names, &names.hooked_group, "v1", &instance(i))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating {}", instance(i)))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    wait_for("every instance of the bound kind to be Ready", || async {
        let list = hooked.list(&ListParams::default()).await?;
        Ok((list.items.len() == m && list.items.iter().all(ready)).then_some(()))
    })
    .await?;
    let ready_s = started.elapsed().as_secs_f64();
    let after = webhook_totals(&host.metrics().await?, "convert");
    let writes = HostSide {
        reviews: after.0 - before.0,
        mean_ms: (after.1 - before.1) * 1e3 / (after.0 - before.0),
    };

    let hooked_v1alpha1 = names.greetings(client, &names.hooked_group, "v1alpha1");
    let lists = [
        (Reading::List("message"), hooked.clone()),
        (Reading::List("text"), hooked_v1alpha1.clone()),
    ];
    let gets = [
        (Reading::Get("message"), hooked),
        (Reading::Get("text"), hooked_v1alpha1),
    ];
    for _ in 0..LIST_WARMUP {
        for (reading, api) in &lists {
            read(api, *reading, m, "").await?;
        }
    }
    let mut list_tallies: [Tally; 2] = Default::default();
    let mut get_tallies: [Tally; 2] = Default::default();
    for round in 0..r {
        for k in 0..lists.len() {
            let i = (round + k) % lists.len();
            let (reading, api) = &lists[i];
            timed(host, &mut list_tallies[i], read(api, *reading, m, ""))
                .await
                .with_context(|| format!("LIST {round}"))?;
        }
        for object in 0..m {
            for k in 0..gets.len() {
                let i = (round + object + k) % gets.len();
                let (reading, api) = &gets[i];
                timed(
                    host,
                    &mut get_tallies[i],
                    read(api, *reading, m, &instance(object)),
                )
                .await
                .with_context(|| format!("GET {round}/{object}"))?;
            }
        }
    }
    let [list_v1, list_v1alpha1] = list_tallies.map(|t| t.read());
    let [get_v1, get_v1alpha1] = get_tallies.map(|t| t.read());
    ensure!(
        get_v1alpha1.reviews_per_read > 0.0 || list_v1alpha1.reviews_per_read > 0.0,
        "no read at v1alpha1 was converted through the host"
    );
    Ok(Conversion {
        ready_s,
        writes,
        list_v1,
        list_v1alpha1,
        get_v1,
        get_v1alpha1,
    })
}

/// The name of instance `i`.
fn instance(i: usize) -> String {
    format!("greeting-{i:05}")
}

/// Runs `reading`, adding its time and the convert reviews the host answered meanwhile (its
/// `/metrics` read before and after, untimed) to `tally`.
async fn timed(
    host: &HostProcess,
    tally: &mut Tally,
    reading: impl Future<Output = anyhow::Result<f64>>,
) -> anyhow::Result<()> {
    let before = webhook_totals(&host.metrics().await?, "convert");
    let ms = reading.await?;
    let after = webhook_totals(&host.metrics().await?, "convert");
    tally.times.push(ms);
    tally.reviews += after.0 - before.0;
    tally.host_seconds += after.1 - before.1;
    Ok(())
}

/// Whether `object`'s Ready condition is True.
fn ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// One read, in ms: a LIST of the namespace, which must hold the `m` instances, or a GET of
/// `name`; an error unless every object read holds the field of `spec` the variant names.
async fn read(
    api: &Api<DynamicObject>,
    reading: Reading,
    m: usize,
    name: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let (objects, field) = match reading {
        Reading::List(field) => (api.list(&ListParams::default()).await?.items, field),
        Reading::Get(field) => (vec![api.get(name).await?], field),
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if let Reading::List(_) = reading {
        ensure!(
            objects.len() == m,
            "a LIST held {} instances, not {m}",
            objects.len()
        );
    }
    if let Some(wrong) = objects.iter().find(|o| o.data["spec"][field] != "hi") {
        bail!(
            "{:?} was served without spec.{field}: {}",
            wrong.metadata.name,
            wrong.data["spec"]
        );
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::{Stats, webhook_totals};

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let stats = Stats::of(&samples);
        assert_eq!(stats.n, 100);
        assert_eq!((stats.p50, stats.p90, stats.p99), (50.0, 90.0, 99.0));
        assert_eq!(stats.mean, 50.5);
        let one = Stats::of(&[3.0]);
        assert_eq!((one.p50, one.p99, one.mean), (3.0, 3.0, 3.0));
    }

    #[test]
    fn webhook_totals_sum_one_webhook_over_bindings_and_results() {
        let text = "\
# HELP wasmop_webhook_requests Webhook reviews answered
wasmop_webhook_requests_total{webhook=\"validate\",binding=\"a\",result=\"allowed\"} 3
wasmop_webhook_requests_total{webhook=\"validate\",binding=\"a\",result=\"denied\"} 2
wasmop_webhook_requests_total{webhook=\"convert\",binding=\"a\",result=\"converted\"} 7
wasmop_webhook_duration_seconds_sum{webhook=\"validate\",binding=\"a\",result=\"allowed\"} 0.25
wasmop_webhook_duration_seconds_count{webhook=\"validate\",binding=\"a\",result=\"allowed\"} 3
wasmop_webhook_duration_seconds_sum{webhook=\"validate\",binding=\"a\",result=\"denied\"} 0.5
";
        assert_eq!(webhook_totals(text, "validate"), (5.0, 0.75));
        assert_eq!(webhook_totals(text, "convert"), (7.0, 0.0));
    }
}
