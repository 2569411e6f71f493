//! Label selectors as Kubernetes evaluates them (`k8s.io/apimachinery/pkg/labels`,
//! `LabelSelectorAsSelector`): every `matchLabels` pair and every `matchExpressions`
//! requirement must hold; an empty selector matches everything. A selector the API server would
//! refuse (an `In`/`NotIn` without values, `Exists` with values, an unknown operator) is an
//! error, so a typo in a policy never widens what it selects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`; `Err` names what is wrong with the selector.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let mut all = true;
    for (key, value) in selector.match_labels.iter().flatten() {
        all &= labels.get(key) == Some(value);
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("matchExpressions[{i}]");
        let values = req.values.as_deref().unwrap_or_default();
        let held = match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!("{at}: operator {} needs values", req.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!("{at}: operator {} takes no values", req.operator));
            }
            "In" => labels.get(&req.key).is_some_and(|v| values.contains(v)),
            "NotIn" => !labels.get(&req.key).is_some_and(|v| values.contains(v)),
            "Exists" => labels.contains_key(&req.key),
            "DoesNotExist" => !labels.contains_key(&req.key),
            other => {
                return Err(format!(
                    "{at}: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
                ));
            }
        };
        all &= held;
    }
    Ok(all)
}

/// How many requirements `selector` states: the more, the more specific.
pub fn requirements(selector: &LabelSelector) -> usize {
    selector.match_labels.as_ref().map_or(0, BTreeMap::len)
        + selector.match_expressions.as_ref().map_or(0, Vec::len)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn selector(value: serde_json::Value) -> LabelSelector {
        serde_json::from_value(value).expect("a LabelSelector")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selects_everything_and_pairs_must_all_hold() {
        let team = labels(&[("team", "a"), ("tier", "prod")]);
        assert_eq!(matches(&selector(json!({})), &team), Ok(true));
        assert_eq!(matches(&selector(json!({})), &labels(&[])), Ok(true));
        let both = selector(json!({"matchLabels": {"team": "a", "tier": "prod"}}));
        assert_eq!(matches(&both, &team), Ok(true));
        assert_eq!(matches(&both, &labels(&[("team", "a")])), Ok(false));
        assert_eq!(requirements(&both), 2);
    }

    #[test]
    fn expressions_follow_the_upstream_operators() {
        let prod = labels(&[("tier", "prod")]);
        let cases = [
            (
                json!({"key": "tier", "operator": "In", "values": ["prod", "qa"]}),
                true,
            ),
            (
                json!({"key": "tier", "operator": "In", "values": ["qa"]}),
                false,
            ),
            (
                json!({"key": "tier", "operator": "NotIn", "values": ["qa"]}),
                true,
            ),
            (
                json!({"key": "absent", "operator": "NotIn", "values": ["qa"]}),
                true,
            ),
            (
                json!({"key": "tier", "operator": "NotIn", "values": ["prod"]}),
                false,
            ),
            (json!({"key": "tier", "operator": "Exists"}), true),
            (json!({"key": "absent", "operator": "Exists"}), false),
            (json!({"key": "absent", "operator": "DoesNotExist"}), true),
            (json!({"key": "tier", "operator": "DoesNotExist"}), false),
        ];
        for (expr, want) in cases {
            let sel = selector(json!({"matchExpressions": [expr.clone()]}));
            assert_eq!(matches(&sel, &prod), Ok(want), "{expr}");
        }
    }

    #[test]
    fn malformed_selectors_are_errors_not_matches() {
        for expr in [
            json!({"key": "tier", "operator": "In", "values": []}),
            json!({"key": "tier", "operator": "Exists", "values": ["x"]}),
            json!({"key": "tier", "operator": "Equals", "values": ["x"]}),
        ] {
            let sel = selector(json!({"matchExpressions": [expr.clone()]}));
            assert!(matches(&sel, &labels(&[("tier", "x")])).is_err(), "{expr}");
        }
    }
}
