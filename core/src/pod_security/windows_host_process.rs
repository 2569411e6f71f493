//! `windowsHostProcess` (baseline): no `windowsOptions.hostProcess=true`, at pod or container
//! level. Port of upstream `check_windowsHostProcess.go` (`windowsHostProcess_1_0`, the latest).

use serde_json::Value;

use super::{Finding, Obj, Reader, containers_phrase};

const REASON: &str = "hostProcess";

fn host_process(r: &mut Reader<'_>, security_context: &Obj<'_>) -> Option<super::FieldPath> {
    let options = security_context.object(r, "windowsOptions")?;
    (options.boolean(r, "hostProcess") == Some(true)).then(|| options.at("hostProcess"))
}

/// Forbids Windows host process pods and containers.
pub(super) fn check(template: &Value) -> Option<Finding> {
    let mut r = Reader::new(template);
    let mut paths = Vec::new();
    let mut setters = Vec::new();
    if let Some(sc) = r.pod_security_context()
        && let Some(path) = host_process(&mut r, &sc)
    {
        setters.push("pod".to_string());
        paths.push(path);
    }
    let mut bad = Vec::new();
    for c in r.containers() {
        if let Some(sc) = c.security_context(&mut r)
            && let Some(path) = host_process(&mut r, &sc)
        {
            bad.push(c.name);
            paths.push(path);
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let found = (!setters.is_empty()).then(|| {
        Finding::new(
            REASON,
            format!(
                "{} must not set securityContext.windowsOptions.hostProcess=true",
                setters.join(" and ")
            ),
            paths,
        )
    });
    r.finish(REASON, found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{allowed, forbidden, pod, run};

    /// `check_windowsHostProcess_test.go`.
    #[test]
    fn upstream_cases() {
        run(
            super::check,
            vec![
                forbidden(
                    "host process",
                    pod(json!({
                        "securityContext": { "windowsOptions": { "hostProcess": true } },
                        "containers": [
                            { "name": "a" },
                            { "name": "b", "securityContext": {} },
                            { "name": "c", "securityContext": { "windowsOptions": {} } },
                            { "name": "d", "securityContext": { "windowsOptions": { "hostProcess": false } } },
                            { "name": "e", "securityContext": { "windowsOptions": { "hostProcess": true } } },
                            { "name": "f", "securityContext": { "windowsOptions": { "hostProcess": true } } },
                        ],
                    })),
                    "hostProcess",
                    r#"pod and containers "e", "f" must not set securityContext.windowsOptions.hostProcess=true"#,
                    &[
                        "spec.securityContext.windowsOptions.hostProcess",
                        "spec.containers[4].securityContext.windowsOptions.hostProcess",
                        "spec.containers[5].securityContext.windowsOptions.hostProcess",
                    ],
                ),
                allowed(
                    "not a host process",
                    pod(json!({
                        "os": { "name": "windows" },
                        "securityContext": { "windowsOptions": { "hostProcess": false, "runAsUserName": "u" } },
                    })),
                ),
            ],
        );
    }
}
