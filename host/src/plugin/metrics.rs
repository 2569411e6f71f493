//! Prometheus metrics of the plugin runtime: loads, swaps, compile time, call duration by
//! capability and call errors by reason.

use prometheus_client::{
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};

type Labels = Vec<(&'static str, String)>;

/// The plugin runtime's metric families.
#[derive(Clone)]
pub struct PluginMetrics {
    loads: Family<Labels, Counter>,
    swaps: Counter,
    compile_seconds: Family<Labels, Histogram>,
    call_seconds: Family<Labels, Histogram>,
    call_errors: Family<Labels, Counter>,
}

impl PluginMetrics {
    /// Creates the families and registers them in `registry` (prefix it with `wasmop`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            loads: Family::default(),
            swaps: Counter::default(),
            compile_seconds: Family::new_with_constructor(|| {
                Histogram::new([0.001, 0.005, 0.02, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
            }),
            call_seconds: Family::new_with_constructor(|| {
                Histogram::new([
                    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.02, 0.1, 0.5, 2.0,
                ])
            }),
            call_errors: Family::default(),
        };
        registry.register(
            "plugin_loads",
            "Plugin versions offered for loading, by result and reason",
            metrics.loads.clone(),
        );
        registry.register(
            "plugin_swaps",
            "Live swaps of the plugin behind a source reference",
            metrics.swaps.clone(),
        );
        registry.register(
            "plugin_compile_seconds",
            "Time to compile a plugin or load it from the cache",
            metrics.compile_seconds.clone(),
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Duration of plugin calls by capability",
            metrics.call_seconds.clone(),
        );
        registry.register(
            "plugin_call_errors",
            "Failed plugin calls by capability and reason",
            metrics.call_errors.clone(),
        );
        metrics
    }

    /// Metrics that are counted but exported nowhere (tools and tests).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    pub(crate) fn load(&self, result: &'static str, reason: &str) {
        self.loads
            .get_or_create(&vec![
                ("result", result.to_string()),
                ("reason", reason.to_string()),
            ])
            .inc();
    }

    pub(crate) fn swap(&self) {
        self.swaps.inc();
    }

    pub(crate) fn compiled(&self, seconds: f64, from_cache: bool) {
        self.compile_seconds
            .get_or_create(&vec![("cached", from_cache.to_string())])
            .observe(seconds);
    }

    pub(crate) fn call(&self, interface: &'static str, seconds: f64, error: Option<&'static str>) {
        self.call_seconds
            .get_or_create(&vec![("capability", interface.to_string())])
            .observe(seconds);
        if let Some(reason) = error {
            self.call_errors
                .get_or_create(&vec![
                    ("capability", interface.to_string()),
                    ("reason", reason.to_string()),
                ])
                .inc();
        }
    }
}
