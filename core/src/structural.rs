//! From a JSON Schema to a Kubernetes structural schema: what a CustomResourceDefinition's
//! `openAPIV3Schema` accepts. A plugin declares its configuration's schema as JSON Schema text
//! (`metadata.info.config-schema`; the Rust SDK derives it with schemars, draft 2020-12), and the
//! host's own status schema comes from schemars too; [`structural`] rewrites either into the
//! subset the API server takes, and refuses, naming the rule and the place, what has no
//! structural equivalent. The host does it once, at load ([`plugin_config`]), so a plugin whose
//! schema cannot become a CRD is refused then, not when someone renders its CRD.
//!
//! The rules are Kubernetes' ("Specifying a structural schema", in the CustomResourceDefinition
//! docs, and `apiextensions-apiserver`'s validation), and the rewrites follow kube-rs, whose
//! `kube-core` `schema.rs` makes schemars' output structural for `#[derive(CustomResource)]`
//! (`StructuralSchemaRewriter`: enums and tagged unions hoisted out of `oneOf`/`anyOf`,
//! `additionalProperties: true` beside `properties` become `x-kubernetes-preserve-unknown-fields`,
//! `uniqueItems` dropped; `OptionalEnum`: `anyOf [T, null]` becomes `T` with `nullable`). Where
//! kube-rs panics (variants whose properties differ) this module refuses with an error instead,
//! and it also does what kube-rs leaves to schemars' OpenAPI 3 settings:
//!
//! - `$ref`s into the document's `$defs`, `definitions` or `components/schemas` are inlined, and
//!   a recursive one is refused (a CRD schema cannot refer to itself);
//! - `$schema`, `$id`, `$comment`, `title`, `deprecated`, `readOnly`, `writeOnly` and
//!   `contentMediaType`/`contentEncoding` are dropped (annotations a CRD has no field for, or
//!   that say nothing to the API server);
//! - `type: [T, "null"]` and a `null` branch of `anyOf`/`oneOf` become `nullable: true`;
//! - `const` becomes a one-value `enum`, `examples` its first `example`, and a numeric
//!   `exclusiveMinimum`/`exclusiveMaximum` (draft 2020-12) the OpenAPI 3.0 pair of
//!   `minimum`/`maximum` and a boolean;
//! - a branchy value of exactly integer or string becomes `x-kubernetes-int-or-string`, and a
//!   schema that constrains nothing (`true`, `{}`, a bare description) becomes
//!   `x-kubernetes-preserve-unknown-fields`;
//! - an integer `format` Kubernetes does not know (schemars' `uint32`, `int8`, `uint`...)
//!   becomes `int64` with the Rust type's bounds, as the host's own CRDs have it
//!   (`crd_install`), and any other unknown format is dropped (the API server warns about it on
//!   every apply and checks none);
//! - a `default: null` is dropped (the API server prunes nulls anyway, and refuses a `null`
//!   default on a field that is not nullable);
//! - a `oneOf` whose hoisted variants' `required` lists include one another becomes `anyOf`
//!   (with overlapping lists, `oneOf` would refuse a valid object matching two of them).
//!
//! Anything else a CRD has no field for (`patternProperties`, `if`/`then`/`else`, tuples,
//! `dependentRequired`, unknown keywords) is refused. The result is checked once more by the
//! structural rules themselves ([`check_structural`]).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// Longest configuration schema a plugin may declare, as JSON text.
pub const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// Longest a schema may become once its `$ref`s are inlined, as JSON text: a CRD is one object
/// in etcd (1.5 MiB at most, with every version's schema).
pub const MAX_REWRITTEN_BYTES: usize = 512 << 10;
/// Deepest a schema's JSON may nest, as declared and once inlined (the nesting of a
/// configuration, counting `properties` and the field's name each as one level).
pub const MAX_DEPTH: usize = 64;
/// Most schema nodes the inlining may produce, before the byte bound is measured: inlining can
/// multiply a small document (each definition referring to the next one twice).
const MAX_NODES: usize = 20_000;
/// Most bytes of values the rewriting may copy (descriptions, enums, defaults, CEL rules...),
/// counted as it copies them: a value under a definition inlined 2^n times is copied 2^n times,
/// and the bound on the result ([`MAX_REWRITTEN_BYTES`]) must hold before the copies are made,
/// not after (a 200 KB schema of doubling `$ref`s over a long `enum` would otherwise take
/// gigabytes of the host's memory at load).
const MAX_COPIED_BYTES: usize = MAX_REWRITTEN_BYTES;

/// `x-kubernetes-*` extensions a CRD schema has, which pass through as given.
const KUBERNETES_EXTENSIONS: [&str; 8] = [
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-field-name",
];

/// Keywords kept as they are: those of a CRD's `JSONSchemaProps` that need no rewriting.
const KEPT: [&str; 16] = [
    "description",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "nullable",
    "example",
    "externalDocs",
];

/// Annotations dropped: a CRD has no field for them, or they say nothing to the API server
/// (`title` is the Rust type's name as schemars writes it).
const DROPPED: [&str; 11] = [
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "title",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    // Pruning drops unknown fields anyway; it is what `deny_unknown_fields` says.
    "unevaluatedProperties",
];

/// Keywords that place a schema inside a logical junctor, where a structural schema may hold
/// value validations only.
const JUNCTORS: [&str; 4] = ["allOf", "anyOf", "oneOf", "not"];

/// Why a schema cannot be a CRD's: the rule it breaks and where (`.backup.schedule`, `.tags[*]`
/// for an array's items, `.labels{*}` for a map's values; `.` for the root).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule} (at {at})")]
pub struct SchemaError {
    /// The place in the configuration, as above.
    pub at: String,
    /// What is wrong, in a sentence.
    pub rule: String,
}

fn refuse<T>(at: &str, rule: impl Into<String>) -> Result<T, SchemaError> {
    Err(SchemaError {
        at: if at.is_empty() { ".".into() } else { at.into() },
        rule: rule.into(),
    })
}

/// A plugin's configuration schema as `metadata.info.config-schema` carries it: at most
/// [`MAX_SCHEMA_BYTES`] of JSON nested at most [`MAX_DEPTH`] deep, made structural
/// ([`structural`]), an object at the root, and at most [`MAX_REWRITTEN_BYTES`] once inlined.
pub fn plugin_config(text: &str) -> Result<Value, SchemaError> {
    if text.len() > MAX_SCHEMA_BYTES {
        return refuse(
            "",
            format!(
                "the schema is {} bytes, over the {MAX_SCHEMA_BYTES} byte bound",
                text.len()
            ),
        );
    }
    let schema: Value = match serde_json::from_str(text) {
        Ok(schema) => schema,
        Err(err) => return refuse("", format!("the schema is not JSON: {err}")),
    };
    let depth = depth(&schema);
    if depth > MAX_DEPTH {
        return refuse(
            "",
            format!("the schema nests {depth} deep, over the bound of {MAX_DEPTH}"),
        );
    }
    let structural = structural(&schema)?;
    if structural.get("type") != Some(&json!("object")) {
        return refuse(
            "",
            "the configuration's schema must be of `type: object` (a CRD's spec is an object)",
        );
    }
    let depth = self::depth(&structural);
    if depth > MAX_DEPTH {
        return refuse(
            "",
            format!("once inlined the schema nests {depth} deep, over the bound of {MAX_DEPTH}"),
        );
    }
    let size = structural.to_string().len();
    if size > MAX_REWRITTEN_BYTES {
        return refuse(
            "",
            format!(
                "once inlined the schema is {size} bytes, over the {MAX_REWRITTEN_BYTES} byte bound"
            ),
        );
    }
    Ok(structural)
}

/// The length of `value` as JSON text, without building the text.
fn text_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; a failure would only undercount a bound already held by
    // the node count.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// How deep `value` nests (a scalar is 0, `{}` and `[]` are 1).
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `schema` (JSON Schema draft 2020-12 or earlier, or OpenAPI 3.0) rewritten into a Kubernetes
/// structural schema, or the rule it cannot be made to follow. See the module docs.
pub fn structural(schema: &Value) -> Result<Value, SchemaError> {
    let mut rewriter = Rewriter {
        root: schema,
        inlining: Vec::new(),
        nodes: 0,
        copied: 0,
    };
    let rewritten = Value::Object(rewriter.schema(schema, "")?);
    check_structural(&rewritten)?;
    Ok(rewritten)
}

/// `{"x-kubernetes-preserve-unknown-fields": true}`: any value.
fn anything() -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
    map
}

struct Rewriter<'a> {
    /// The document, where `$ref`s point.
    root: &'a Value,
    /// The `$ref`s being inlined, outermost first: one seen again is a recursion.
    inlining: Vec<String>,
    /// Schema nodes produced so far.
    nodes: usize,
    /// Bytes of values copied so far ([`MAX_COPIED_BYTES`]).
    copied: usize,
}

impl<'a> Rewriter<'a> {
    /// One schema, rewritten; `at` is its place (see [`SchemaError`]).
    fn schema(&mut self, schema: &'a Value, at: &str) -> Result<Map<String, Value>, SchemaError> {
        self.rewrite(schema, at, true)
    }

    /// Charges `value`'s copy to [`MAX_COPIED_BYTES`] before it is made.
    fn charge(&mut self, value: &Value, at: &str) -> Result<(), SchemaError> {
        self.copied = self.copied.saturating_add(text_len(value));
        if self.copied > MAX_COPIED_BYTES {
            return refuse(
                at,
                format!(
                    "once its $refs are inlined the schema copies over {MAX_COPIED_BYTES} bytes \
                     of values (descriptions, enums, defaults, rules)"
                ),
            );
        }
        Ok(())
    }

    /// [`Self::schema`]; `settle` gives it the type its keywords imply ([`settle_type`]), which a
    /// schema inside `not` must not have.
    fn rewrite(
        &mut self,
        schema: &'a Value,
        at: &str,
        settle: bool,
    ) -> Result<Map<String, Value>, SchemaError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return refuse(
                at,
                format!("once its $refs are inlined the schema has over {MAX_NODES} nodes"),
            );
        }
        let object = match schema {
            Value::Bool(true) => return Ok(anything()),
            Value::Bool(false) => return refuse(at, "a `false` schema accepts no value"),
            Value::Object(object) => object,
            _ => return refuse(at, "a schema must be a JSON object or a boolean"),
        };
        let mut out = match object.get("$ref") {
            Some(reference) => self.inline(reference, at)?,
            None => Map::new(),
        };
        // The schema's own keywords override what a `$ref` beside them gave (a field's
        // description over its type's).
        for (key, value) in object {
            self.keyword(key, value, at, &mut out)?;
        }
        kubernetes_format(&mut out);
        if let Some(all_of) = object.get("allOf") {
            for (index, entry) in list(all_of, "allOf", at)?.iter().enumerate() {
                let entry = self.schema(entry, at)?;
                merge_all_of(&mut out, entry, index, at)?;
            }
        }
        for junctor in ["anyOf", "oneOf"] {
            if let Some(branches) = object.get(junctor) {
                self.branches(junctor, list(branches, junctor, at)?, at, &mut out)?;
            }
        }
        if settle {
            settle_type(&mut out, at)?;
        }
        Ok(out)
    }

    /// The rewritten target of a local `$ref`.
    fn inline(&mut self, reference: &Value, at: &str) -> Result<Map<String, Value>, SchemaError> {
        let Some(reference) = reference.as_str() else {
            return refuse(at, "`$ref` must be a string");
        };
        let target = ["#/$defs/", "#/definitions/", "#/components/schemas/"]
            .iter()
            .find_map(|prefix| {
                reference.strip_prefix(prefix).and_then(|name| {
                    let name = name.replace("~1", "/").replace("~0", "~");
                    let path = &prefix[2..prefix.len() - 1];
                    path.split('/')
                        .try_fold(self.root, |node, key| node.get(key))
                        .and_then(|defs| defs.get(&name))
                })
            });
        let Some(target) = target else {
            return refuse(
                at,
                format!(
                    "`$ref: {reference}` does not name a schema in the document's $defs or definitions"
                ),
            );
        };
        if self.inlining.iter().any(|r| r == reference) {
            return refuse(
                at,
                format!(
                    "`{reference}` refers to itself; a CustomResourceDefinition's schema cannot be recursive"
                ),
            );
        }
        if self.inlining.len() >= MAX_DEPTH {
            return refuse(at, format!("$refs nest over {MAX_DEPTH} deep"));
        }
        self.inlining.push(reference.to_string());
        let inlined = self.schema(target, at);
        self.inlining.pop();
        inlined
    }

    /// One keyword of a schema into `out`.
    fn keyword(
        &mut self,
        key: &str,
        value: &'a Value,
        at: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), SchemaError> {
        match key {
            // Handled by `schema` around the keywords.
            "$ref" | "allOf" | "anyOf" | "oneOf" => {}
            // Where `$ref`s point: inlined from there, not copied.
            "$defs" | "definitions" | "components" => {}
            _ if DROPPED.contains(&key) => {}
            _ if KEPT.contains(&key) || KUBERNETES_EXTENSIONS.contains(&key) => {
                self.charge(value, at)?;
                out.insert(key.into(), value.clone());
            }
            "type" => match value {
                Value::String(kind) if kind == "null" => {
                    return refuse(at, "a value that can only be null has no structural type");
                }
                Value::String(_) => {
                    self.charge(value, at)?;
                    out.insert("type".into(), value.clone());
                }
                Value::Array(kinds) => {
                    let mut kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
                    if kinds.contains(&"null") {
                        kinds.retain(|k| *k != "null");
                        out.insert("nullable".into(), true.into());
                    }
                    match kinds.as_slice() {
                        [] => {
                            return refuse(
                                at,
                                "a value that can only be null has no structural type",
                            );
                        }
                        [one] => {
                            out.insert("type".into(), (*one).into());
                        }
                        _ if int_or_string(&kinds) => {
                            out.insert("x-kubernetes-int-or-string".into(), true.into());
                        }
                        _ => {
                            return refuse(
                                at,
                                format!(
                                    "a value of several types ({}) is not structural; give it one type",
                                    kinds.join(", ")
                                ),
                            );
                        }
                    }
                }
                _ => return refuse(at, "`type` must be a string or a list of strings"),
            },
            // Made one Kubernetes knows once the bounds beside it are in ([`kubernetes_format`]).
            "format" => {
                if !value.is_string() {
                    return refuse(at, "`format` must be a string");
                }
                self.charge(value, at)?;
                out.insert(key.into(), value.clone());
            }
            "default" => {
                if !value.is_null() {
                    self.charge(value, at)?;
                    out.insert(key.into(), value.clone());
                }
            }
            "const" => {
                self.charge(value, at)?;
                if value.is_null() {
                    out.insert("nullable".into(), true.into());
                } else {
                    out.insert("enum".into(), json!([value]));
                }
            }
            "examples" => {
                if let Some(first) = value.as_array().and_then(|e| e.first()) {
                    self.charge(first, at)?;
                    out.insert("example".into(), first.clone());
                }
            }
            "exclusiveMinimum" | "exclusiveMaximum" => match value {
                Value::Bool(_) => {
                    out.insert(key.into(), value.clone());
                }
                Value::Number(_) => {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    out.insert(bound.into(), value.clone());
                    out.insert(key.into(), true.into());
                }
                _ => return refuse(at, format!("`{key}` must be a number or a boolean")),
            },
            // Kubernetes refuses `uniqueItems: true` (quadratic to check); `x-kubernetes-list-type:
            // set` is the way to ask for it, which a plugin may give itself.
            "uniqueItems" => {}
            "properties" => {
                let Value::Object(properties) = value else {
                    return refuse(at, "`properties` must be an object");
                };
                let mut rewritten = Map::new();
                for (name, schema) in properties {
                    let field = format!("{at}.{name}");
                    rewritten.insert(name.clone(), Value::Object(self.schema(schema, &field)?));
                }
                out.insert(key.into(), Value::Object(rewritten));
            }
            "additionalProperties" => match value {
                Value::Bool(false) => {}
                Value::Bool(true) => {
                    out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
                }
                _ => {
                    let values = format!("{at}{{*}}");
                    let schema = self.schema(value, &values)?;
                    out.insert(key.into(), Value::Object(schema));
                }
            },
            "items" => match value {
                Value::Array(_) => {
                    return refuse(
                        at,
                        "a tuple (`items` as a list) is not structural; use an array of one type or an object",
                    );
                }
                _ => {
                    let items = format!("{at}[*]");
                    let schema = self.schema(value, &items)?;
                    out.insert(key.into(), Value::Object(schema));
                }
            },
            "not" => {
                let mut schema = self.rewrite(value, at, false)?;
                schema.remove("description");
                out.insert(key.into(), Value::Object(schema));
            }
            "prefixItems" | "additionalItems" => {
                return refuse(
                    at,
                    format!(
                        "`{key}` (a tuple) is not structural; use an array of one type or an object"
                    ),
                );
            }
            _ => {
                return refuse(
                    at,
                    format!("`{key}` has no equivalent in a CustomResourceDefinition's schema"),
                );
            }
        }
        Ok(())
    }

    /// `anyOf`/`oneOf`, folded into `out` where a structural schema allows: a `null` branch is
    /// `nullable`, one branch left is the schema itself, branches of values are one `enum`,
    /// integer-or-string is `x-kubernetes-int-or-string`, and objects have their properties
    /// hoisted (kube-rs's `hoist_subschema_properties`) with only their `required` lists left
    /// in the junctor.
    fn branches(
        &mut self,
        junctor: &str,
        branches: &'a [Value],
        at: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), SchemaError> {
        let mut kept = Vec::new();
        for branch in branches {
            if is_null(branch) {
                out.insert("nullable".into(), true.into());
            } else {
                kept.push(self.schema(branch, at)?);
            }
        }
        match kept.len() {
            0 => refuse(at, format!("`{junctor}` without a branch that is not null")),
            1 => {
                let only = kept.pop().unwrap_or_default();
                for (key, value) in only {
                    out.entry(key).or_insert(value);
                }
                Ok(())
            }
            _ if kept.iter().all(|b| b.contains_key("enum") && !is_object(b)) => {
                hoist_values(junctor, kept, at, out)
            }
            _ if int_or_string(
                &kept
                    .iter()
                    .filter_map(|b| b.get("type").and_then(Value::as_str))
                    .collect::<Vec<_>>(),
            ) && kept.len() == 2
                && kept.iter().all(|b| {
                    b.keys()
                        .all(|k| k == "type" || k == "format" || k == "description")
                }) =>
            {
                out.insert("x-kubernetes-int-or-string".into(), true.into());
                Ok(())
            }
            _ if kept.iter().all(is_object) => hoist_properties(junctor, kept, at, out),
            _ => {
                let kinds: BTreeSet<&str> = kept
                    .iter()
                    .map(|b| b.get("type").and_then(Value::as_str).unwrap_or("any"))
                    .collect();
                refuse(
                    at,
                    format!(
                        "`{junctor}` of different types ({}) is not structural; use one type (an untagged enum of objects, or of values of one type)",
                        kinds.into_iter().collect::<Vec<_>>().join(", ")
                    ),
                )
            }
        }
    }
}

/// The formats the API server knows (`apiextensions-apiserver`'s `supportedFormats`); it warns
/// about any other on every apply of the CRD, and checks none.
const KUBERNETES_FORMATS: [&str; 29] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
    "int32",
    "int64",
    "float",
    "double",
];

/// `format` as Kubernetes knows it: the integer formats schemars writes for Rust's other integer
/// types (`uint32`, `int8`, `uint`...) become `int64` with the type's bounds as `minimum` and
/// `maximum` (a tighter bound the schema gives stays), as the host's own CRDs do
/// (`crd_install`); a format the API server does not know is dropped, since it checks none.
fn kubernetes_format(out: &mut Map<String, Value>) {
    let Some(Value::String(format)) = out.remove("format") else {
        return;
    };
    let format = format.as_str();
    let bounds: Option<(i64, Option<u64>)> = match format {
        "uint8" => Some((0, Some(u8::MAX.into()))),
        "uint16" => Some((0, Some(u16::MAX.into()))),
        "uint32" => Some((0, Some(u32::MAX.into()))),
        "uint64" | "uint" | "uint128" => Some((0, None)),
        "int8" => Some((i8::MIN.into(), Some(i8::MAX.unsigned_abs().into()))),
        "int16" => Some((i16::MIN.into(), Some(i16::MAX.unsigned_abs().into()))),
        "int" | "int128" => Some((i64::MIN, None)),
        _ => None,
    };
    let Some((min, max)) = bounds else {
        if KUBERNETES_FORMATS.contains(&format) {
            out.insert("format".into(), format.into());
        }
        return;
    };
    out.insert("format".into(), "int64".into());
    let declared = |out: &Map<String, Value>, key: &str| out.get(key).and_then(Value::as_f64);
    if min > i64::MIN && declared(out, "minimum").is_none_or(|m| m < min as f64) {
        out.insert("minimum".into(), min.into());
    }
    if let Some(max) = max
        && declared(out, "maximum").is_none_or(|m| m > max as f64)
    {
        out.insert("maximum".into(), max.into());
    }
}

fn list<'a>(value: &'a Value, keyword: &str, at: &str) -> Result<&'a [Value], SchemaError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => refuse(at, format!("`{keyword}` must be a list of schemas")),
    }
}

fn int_or_string(kinds: &[&str]) -> bool {
    let kinds: BTreeSet<&str> = kinds.iter().copied().collect();
    kinds == BTreeSet::from(["integer", "string"])
}

/// A branch that admits only `null`: `{type: null}`, `{const: null}`, `{enum: [null]}`.
fn is_null(branch: &Value) -> bool {
    branch.get("type") == Some(&json!("null"))
        || branch.get("const") == Some(&Value::Null)
        || branch.get("enum") == Some(&json!([null]))
}

fn is_object(schema: &Map<String, Value>) -> bool {
    schema.get("type") == Some(&json!("object"))
        || (!schema.contains_key("type") && schema.contains_key("properties"))
}

/// The JSON type of a value in an `enum`.
fn type_of(value: &Value) -> Option<&'static str> {
    match value {
        Value::String(_) => Some("string"),
        Value::Bool(_) => Some("boolean"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::Object(_) => Some("object"),
        Value::Array(_) => Some("array"),
        Value::Null => None,
    }
}

/// Branches that are each a set of values (a unit enum's variants, documented one by one):
/// one `enum` of all their values, of their one type, the variants' descriptions listed in the
/// schema's (so `kubectl explain` still shows them).
fn hoist_values(
    junctor: &str,
    branches: Vec<Map<String, Value>>,
    at: &str,
    out: &mut Map<String, Value>,
) -> Result<(), SchemaError> {
    let mut values = Vec::new();
    let mut notes = Vec::new();
    let mut kinds = BTreeSet::new();
    for branch in branches {
        let branch_values = branch
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::String(description)) = branch.get("description") {
            let names: Vec<String> = branch_values
                .iter()
                .map(|v| format!("`{}`", plain(v)))
                .collect();
            notes.push(format!("- {}: {}", names.join(", "), description.trim()));
        }
        if let Some(kind) = branch.get("type").and_then(Value::as_str) {
            kinds.insert(kind.to_string());
        }
        kinds.extend(branch_values.iter().filter_map(type_of).map(str::to_string));
        values.extend(branch_values);
    }
    if kinds.len() > 1 {
        return refuse(
            at,
            format!(
                "`{junctor}` of values of different types ({}) is not structural",
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    if let Some(kind) = kinds.pop_first() {
        out.entry("type").or_insert(kind.into());
    }
    out.insert("enum".into(), Value::Array(values));
    if !notes.is_empty() {
        let listed = notes.join("\n");
        let description = match out.get("description").and_then(Value::as_str) {
            Some(own) => format!("{own}\n\n{listed}"),
            None => listed,
        };
        out.insert("description".into(), description.into());
    }
    Ok(())
}

/// A value as `kubectl explain` would show it: a string without its quotes.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Branches that are each an object (a tagged union's variants, an untagged enum of structs):
/// their properties hoisted into `out` (a property in several branches must have the same
/// schema there, or be values of one type, whose `enum`s are joined: an internally tagged
/// enum's tag), and the branches reduced to their `required` lists. Structural schemas allow
/// only value validations inside a junctor.
fn hoist_properties(
    junctor: &str,
    branches: Vec<Map<String, Value>>,
    at: &str,
    out: &mut Map<String, Value>,
) -> Result<(), SchemaError> {
    out.insert("type".into(), "object".into());
    let mut required_lists: Vec<Vec<Value>> = Vec::new();
    let mut properties = match out.remove("properties") {
        Some(Value::Object(properties)) => properties,
        _ => Map::new(),
    };
    for mut branch in branches {
        if let Some(Value::Object(branch_properties)) = branch.remove("properties") {
            for (name, schema) in branch_properties {
                match properties.get_mut(&name) {
                    None => {
                        properties.insert(name, schema);
                    }
                    Some(existing) if *existing == schema => {}
                    Some(existing) => join_enums(existing, &schema).or_else(|()| {
                        refuse(
                            &format!("{at}.{name}"),
                            format!(
                                "the variants of `{junctor}` give property {name:?} different schemas; a structural schema has one schema per property"
                            ),
                        )
                    })?,
                }
            }
        }
        if branch.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
        }
        required_lists.push(
            branch
                .get("required")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
    }
    if !properties.is_empty() {
        out.insert("properties".into(), Value::Object(properties));
    }
    // A branch requiring nothing admits every object: the junctor would say nothing.
    if required_lists.iter().any(Vec::is_empty) {
        return Ok(());
    }
    let sets: Vec<BTreeSet<String>> = required_lists
        .iter()
        .map(|l| l.iter().map(plain).collect())
        .collect();
    let nested = sets.iter().enumerate().any(|(i, a)| {
        sets.iter()
            .enumerate()
            .any(|(j, b)| i != j && a.is_subset(b))
    });
    let junctor = if junctor == "oneOf" && nested {
        "anyOf"
    } else {
        junctor
    };
    let branches: Vec<Value> = required_lists
        .into_iter()
        .map(|required| json!({ "required": required }))
        .collect();
    out.insert(junctor.into(), Value::Array(branches));
    Ok(())
}

/// Two schemas of the same property that are both `enum`s of one type: `existing` becomes their
/// union. `Err(())` when they are anything else.
fn join_enums(existing: &mut Value, other: &Value) -> Result<(), ()> {
    let values = |schema: &Value| schema.get("enum").and_then(Value::as_array).cloned();
    let (Some(mut mine), Some(theirs)) = (values(existing), values(other)) else {
        return Err(());
    };
    if existing.get("type") != other.get("type") {
        return Err(());
    }
    // A set of the values' texts: two long enums merge in linear time, not quadratic.
    let mut seen: std::collections::HashSet<String> = mine.iter().map(Value::to_string).collect();
    for value in theirs {
        if seen.insert(value.to_string()) {
            mine.push(value);
        }
    }
    existing["enum"] = Value::Array(mine);
    Ok(())
}

/// One `allOf` entry merged into the schema: `properties` joined, `required` united, other
/// keywords taken where the schema lacks them; a keyword both give differently is refused.
fn merge_all_of(
    out: &mut Map<String, Value>,
    entry: Map<String, Value>,
    index: usize,
    at: &str,
) -> Result<(), SchemaError> {
    for (key, value) in entry {
        match (key.as_str(), out.get_mut(&key)) {
            (_, None) => {
                out.insert(key, value);
            }
            (_, Some(existing)) if *existing == value => {}
            // The schema's own words over its parts'.
            ("description", Some(_)) => {}
            ("properties", Some(Value::Object(existing))) => {
                let Value::Object(properties) = value else {
                    return refuse(at, "`properties` must be an object");
                };
                for (name, schema) in properties {
                    match existing.get(&name) {
                        Some(mine) if *mine != schema => {
                            return refuse(
                                &format!("{at}.{name}"),
                                format!(
                                    "`allOf` entry {index} gives property {name:?} another schema"
                                ),
                            );
                        }
                        _ => {
                            existing.insert(name, schema);
                        }
                    }
                }
            }
            ("required", Some(Value::Array(existing))) => {
                let mut seen: std::collections::HashSet<String> =
                    existing.iter().map(Value::to_string).collect();
                for name in value.as_array().cloned().unwrap_or_default() {
                    if seen.insert(name.to_string()) {
                        existing.push(name);
                    }
                }
            }
            (key, Some(_)) => {
                return refuse(
                    at,
                    format!("`allOf` entry {index} gives `{key}` another value"),
                );
            }
        }
    }
    Ok(())
}

/// Gives a schema without `type` the one its keywords imply, or says it admits anything.
fn settle_type(out: &mut Map<String, Value>, at: &str) -> Result<(), SchemaError> {
    if out.contains_key("type")
        || out.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || out.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    {
        return Ok(());
    }
    let implied = if out.contains_key("properties") || out.contains_key("additionalProperties") {
        Some("object")
    } else if out.contains_key("items") {
        Some("array")
    } else if let Some(Value::Array(values)) = out.get("enum") {
        let kinds: BTreeSet<&str> = values.iter().filter_map(type_of).collect();
        match kinds.len() {
            1 => kinds.into_iter().next(),
            _ => {
                return refuse(
                    at,
                    "an `enum` of values of different types is not structural",
                );
            }
        }
    } else {
        None
    };
    match implied {
        Some(kind) => {
            out.insert("type".into(), kind.into());
        }
        None => {
            // Nothing says what the value is: any value, kept as written.
            let validates = out.keys().any(|k| {
                !matches!(
                    k.as_str(),
                    "description"
                        | "default"
                        | "example"
                        | "nullable"
                        | "externalDocs"
                        | "x-kubernetes-validations"
                )
            });
            if validates {
                return refuse(
                    at,
                    "a schema without `type` is not structural; say which type the value has",
                );
            }
            out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
        }
    }
    Ok(())
}

/// Checks `schema` against the structural rules of a CRD's `openAPIV3Schema` (Kubernetes'
/// "Specifying a structural schema"): every field and array item has a `type` (or is
/// `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`); inside `allOf`,
/// `anyOf`, `oneOf` and `not` no `type`, `description`, `default`, `nullable` or
/// `additionalProperties`, and no property or item that is not also specified outside; no
/// `$ref`, no `uniqueItems: true`, and `additionalProperties` never beside `properties`.
pub fn check_structural(schema: &Value) -> Result<(), SchemaError> {
    check_node(schema, "", false)
}

fn check_node(schema: &Value, at: &str, in_junctor: bool) -> Result<(), SchemaError> {
    let Value::Object(node) = schema else {
        return refuse(at, "a schema must be a JSON object");
    };
    if node.contains_key("$ref") {
        return refuse(at, "`$ref` is not allowed in a CustomResourceDefinition");
    }
    if node.get("uniqueItems") == Some(&Value::Bool(true)) {
        return refuse(
            at,
            "`uniqueItems: true` is not allowed; use `x-kubernetes-list-type: set`",
        );
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        return refuse(
            at,
            "`properties` and `additionalProperties` exclude each other",
        );
    }
    if in_junctor {
        for key in [
            "type",
            "description",
            "default",
            "nullable",
            "additionalProperties",
        ] {
            if node.contains_key(key) {
                return refuse(
                    at,
                    format!("`{key}` inside allOf, anyOf, oneOf or not is not structural"),
                );
            }
        }
    } else {
        let typed = node.contains_key("type")
            || node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if !typed {
            return refuse(at, "a field or item without `type` is not structural");
        }
    }
    if let Some(Value::Object(properties)) = node.get("properties") {
        for (name, property) in properties {
            check_node(property, &format!("{at}.{name}"), in_junctor)?;
        }
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        check_node(values, &format!("{at}{{*}}"), in_junctor)?;
    }
    if let Some(items) = node.get("items") {
        check_node(items, &format!("{at}[*]"), in_junctor)?;
    }
    for junctor in JUNCTORS {
        let branches: Vec<&Value> = match node.get(junctor) {
            Some(Value::Array(branches)) => branches.iter().collect(),
            Some(branch @ Value::Object(_)) => vec![branch],
            Some(_) => return refuse(at, format!("`{junctor}` must hold schemas")),
            None => continue,
        };
        for branch in branches {
            check_node(branch, at, true)?;
            // What a junctor says of a property or of items, the schema must say outside it.
            if let Some(Value::Object(inner)) = branch.get("properties") {
                for name in inner.keys() {
                    let outside = node.get("properties").and_then(|p| p.get(name)).is_some();
                    if !outside {
                        return refuse(
                            &format!("{at}.{name}"),
                            format!(
                                "property {name:?} is specified inside {junctor} but not outside it"
                            ),
                        );
                    }
                }
            }
            if branch.get("items").is_some() && node.get("items").is_none() {
                return refuse(
                    at,
                    format!("items are specified inside {junctor} but not outside it"),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(schema: Value) -> Value {
        structural(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"))
    }

    fn refused(schema: Value) -> SchemaError {
        match structural(&schema) {
            Ok(out) => panic!("{schema} was accepted as {out}"),
            Err(err) => err,
        }
    }

    /// Each definition refers to the next twice, the last holds a long `enum`: inlined whole it
    /// would be 2^12 copies of 120 KB. The copy bound refuses it while the copies are made.
    #[test]
    fn doubling_refs_over_a_long_enum_are_refused_before_they_are_copied() {
        let mut defs = Map::new();
        for level in 0..12 {
            let next = format!("#/$defs/d{}", level + 1);
            defs.insert(
                format!("d{level}"),
                json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
            );
        }
        defs.insert(
            "d12".into(),
            json!({"type": "integer", "enum": (0..20_000).collect::<Vec<_>>()}),
        );
        let schema =
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
        assert!(schema.to_string().len() < MAX_SCHEMA_BYTES);
        let err = refused(schema);
        assert!(err.to_string().contains("copies over"), "{err}");
    }

    #[test]
    fn refs_are_inlined_and_annotations_dropped() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Config",
            "description": "The configuration.",
            "type": "object",
            "properties": {
                "backup": {"$ref": "#/$defs/Backup", "description": "Backups."},
                "old": {"$ref": "#/definitions/Old"},
            },
            "$defs": {"Backup": {"title": "Backup", "description": "Type docs.", "type": "object",
                "properties": {"schedule": {"type": "string"}}}},
            "definitions": {"Old": {"type": "integer", "format": "int32", "deprecated": true}},
        });
        assert_eq!(
            ok(schema),
            json!({
                "description": "The configuration.",
                "type": "object",
                "properties": {
                    "backup": {"description": "Backups.", "type": "object",
                        "properties": {"schedule": {"type": "string"}}},
                    "old": {"type": "integer", "format": "int32"},
                },
            })
        );
    }

    #[test]
    fn options_become_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": ["string", "null"], "default": null},
                "backup": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}], "description": "Field."},
                "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"const": null}]},
            },
            "$defs": {
                "B": {"type": "object", "description": "Type.", "properties": {"n": {"type": "integer"}}},
                "Mode": {"type": "string", "enum": ["a", "b"]},
            },
        });
        let out = ok(schema);
        assert_eq!(
            out["properties"]["name"],
            json!({"type": "string", "nullable": true})
        );
        assert_eq!(
            out["properties"]["backup"],
            json!({"description": "Field.", "nullable": true, "type": "object",
                "properties": {"n": {"type": "integer"}}})
        );
        assert_eq!(
            out["properties"]["mode"],
            json!({"nullable": true, "type": "string", "enum": ["a", "b"]})
        );
    }

    #[test]
    fn documented_unit_variants_become_one_enum() {
        let schema = json!({
            "description": "Retention.",
            "oneOf": [
                {"type": "string", "const": "Retain", "description": "Keep them."},
                {"type": "string", "const": "Delete", "description": "Delete them."},
            ],
        });
        assert_eq!(
            ok(schema),
            json!({
                "type": "string",
                "enum": ["Retain", "Delete"],
                "description": "Retention.\n\n- `Retain`: Keep them.\n- `Delete`: Delete them.",
            })
        );
    }

    #[test]
    fn tagged_unions_have_their_properties_hoisted() {
        // Externally tagged: `{"http": {...}}` or `{"tcp": {...}}`.
        let external = json!({
            "oneOf": [
                {"type": "object", "properties": {"http": {"type": "string"}}, "required": ["http"],
                 "additionalProperties": false, "description": "HTTP."},
                {"type": "object", "properties": {"tcp": {"type": "integer"}}, "required": ["tcp"],
                 "additionalProperties": false},
            ],
        });
        assert_eq!(
            ok(external),
            json!({
                "type": "object",
                "properties": {"http": {"type": "string"}, "tcp": {"type": "integer"}},
                "oneOf": [{"required": ["http"]}, {"required": ["tcp"]}],
            })
        );
        // Internally tagged: the tag's values are joined; the required lists overlap, so
        // `oneOf` becomes `anyOf` (an object matching both would be refused by `oneOf`).
        let internal = json!({
            "oneOf": [
                {"type": "object", "properties": {"kind": {"type": "string", "const": "a"},
                    "x": {"type": "integer"}}, "required": ["kind", "x"]},
                {"type": "object", "properties": {"kind": {"type": "string", "const": "b"}},
                    "required": ["kind"]},
            ],
        });
        let out = ok(internal);
        assert_eq!(
            out["properties"]["kind"],
            json!({"type": "string", "enum": ["a", "b"]})
        );
        assert_eq!(
            out["anyOf"],
            json!([{"required": ["kind", "x"]}, {"required": ["kind"]}])
        );
        assert!(out.get("oneOf").is_none());
        check_structural(&out).expect("structural");
    }

    #[test]
    fn free_form_values_preserve_unknown_fields() {
        let out = ok(json!({
            "type": "object",
            "properties": {
                "any": true,
                "doc": {"description": "Anything."},
                "map": {"type": "object", "additionalProperties": true},
                "flat": {"type": "object", "properties": {"a": {"type": "string"}},
                         "additionalProperties": true},
                "closed": {"type": "object", "properties": {"a": {"type": "string"}},
                           "additionalProperties": false},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }));
        let p = &out["properties"];
        assert_eq!(
            p["any"],
            json!({"x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            p["doc"],
            json!({"description": "Anything.", "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            p["map"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            p["flat"]["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
        assert!(p["flat"].get("additionalProperties").is_none());
        assert!(p["closed"].get("additionalProperties").is_none());
        assert_eq!(
            p["labels"]["additionalProperties"],
            json!({"type": "string"})
        );
    }

    #[test]
    fn draft_2020_keywords_become_openapi_3_0() {
        let out = ok(json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 10, "examples": [3, 4]},
                "c": {"const": "fixed"},
                "set": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
                "port": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
        }));
        let p = &out["properties"];
        assert_eq!(
            p["n"],
            json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true, "maximum": 10, "example": 3})
        );
        assert_eq!(p["c"], json!({"enum": ["fixed"], "type": "string"}));
        assert_eq!(
            p["set"],
            json!({"type": "array", "items": {"type": "string"}})
        );
        assert_eq!(p["port"], json!({"x-kubernetes-int-or-string": true}));
    }

    #[test]
    fn formats_are_the_ones_kubernetes_knows() {
        let out = ok(json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "format": "uint32", "minimum": 0},
                "b": {"type": "integer", "format": "uint8", "minimum": 1, "maximum": 9},
                "c": {"type": "integer", "format": "int16"},
                "d": {"type": "integer", "format": "uint"},
                "e": {"type": "string", "format": "date-time"},
                "f": {"type": "string", "format": "made-up"},
            },
        }));
        let p = &out["properties"];
        assert_eq!(
            p["a"],
            json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295u64})
        );
        assert_eq!(
            p["b"],
            json!({"type": "integer", "format": "int64", "minimum": 1, "maximum": 9})
        );
        assert_eq!(
            p["c"],
            json!({"type": "integer", "format": "int64", "minimum": -32768, "maximum": 32767})
        );
        assert_eq!(
            p["d"],
            json!({"type": "integer", "format": "int64", "minimum": 0})
        );
        assert_eq!(p["e"]["format"], "date-time");
        assert!(p["f"].get("format").is_none());
    }

    #[test]
    fn validations_and_kubernetes_extensions_pass_through() {
        let schema = json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min > max"}],
            "required": ["min"],
            "properties": {
                "min": {"type": "integer", "minimum": 1, "maximum": 15, "default": 3},
                "max": {"type": "integer"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 1, "maxLength": 63},
                "policy": {"type": "string", "enum": ["a", "b"]},
            },
        });
        assert_eq!(ok(schema.clone()), schema);
    }

    #[test]
    fn what_has_no_structural_form_is_refused_with_its_place() {
        let cases = [
            (
                json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
                "properties": {"next": {"$ref": "#/$defs/Node"}}}}}),
                ".next",
                "recursive",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}),
                ".a",
                "does not name",
            ),
            (
                json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "object"}]}}}),
                ".v",
                "different types",
            ),
            (
                json!({"type": "object", "properties": {"t": {"type": "array", "prefixItems": [{"type": "string"}]}}}),
                ".t",
                "tuple",
            ),
            (
                json!({"type": "object", "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}}),
                ".t",
                "tuple",
            ),
            (
                json!({"type": "object", "patternProperties": {"^a": {"type": "string"}}}),
                ".",
                "patternProperties",
            ),
            (
                json!({"type": "object", "properties": {"x": {"if": {}}}}),
                ".x",
                "`if`",
            ),
            (
                json!({"type": "object", "properties": {"x": {"type": ["string", "boolean"]}}}),
                ".x",
                "several types",
            ),
            (
                json!({"type": "object", "properties": {"x": {"minimum": 3}}}),
                ".x",
                "without `type`",
            ),
            (
                json!({"type": "object", "properties": {"x": false}}),
                ".x",
                "no value",
            ),
            (
                json!({"type": "object", "properties": {"x": {"type": "null"}}}),
                ".x",
                "only be null",
            ),
            (
                json!({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                              {"type": "object", "properties": {"a": {"type": "integer"}}}]}),
                ".a",
                "different schemas",
            ),
            (
                json!({"type": "object", "properties": {"m": {"type": "object",
                "additionalProperties": {"type": "string"}, "properties": {"a": {"type": "string"}}}}}),
                ".m",
                "exclude each other",
            ),
        ];
        for (schema, at, words) in cases {
            let err = refused(schema.clone());
            assert_eq!(err.at, at, "{schema}: {err}");
            assert!(err.rule.contains(words), "{schema}: {err}");
        }
    }

    #[test]
    fn the_structural_check_holds_junctors_to_value_validations() {
        for (schema, words) in [
            (
                json!({"type": "object", "anyOf": [{"type": "object"}]}),
                "`type` inside",
            ),
            (
                json!({"type": "object", "oneOf": [{"description": "x"}]}),
                "`description` inside",
            ),
            (
                json!({"type": "object", "oneOf": [{"properties": {"a": {}}}]}),
                "not outside",
            ),
            (
                json!({"type": "object", "properties": {"a": {"description": "x"}}}),
                "without `type`",
            ),
            (
                json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
                "uniqueItems",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
                "$ref",
            ),
        ] {
            let err = check_structural(&schema).expect_err(&schema.to_string());
            assert!(err.rule.contains(words), "{schema}: {err}");
        }
        check_structural(
            &json!({"type": "object", "properties": {"a": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"properties": {"a": {"minLength": 2}}}]}),
        )
        .expect("value validations of specified properties");
    }

    #[test]
    fn plugin_schemas_are_bounded_objects() {
        let err = plugin_config("{").expect_err("not JSON");
        assert!(err.rule.contains("not JSON"), "{err}");
        let err = plugin_config(r#"{"type": "string"}"#).expect_err("not an object");
        assert!(err.rule.contains("type: object"), "{err}");
        let err = plugin_config(&" ".repeat(MAX_SCHEMA_BYTES + 1)).expect_err("too big");
        assert!(err.rule.contains("byte bound"), "{err}");
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        let err = plugin_config(&deep.to_string()).expect_err("too deep");
        assert!(err.rule.contains("nests"), "{err}");
        // Each definition twice the next: 2^30 nodes once inlined, from a few hundred bytes.
        let mut defs = Map::new();
        for i in 0..30 {
            let next = format!("#/$defs/D{}", i + 1);
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
            );
        }
        defs.insert("D30".into(), json!({"type": "string"}));
        let bomb = json!({"$ref": "#/$defs/D0", "$defs": defs});
        let err = plugin_config(&bomb.to_string()).expect_err("a bomb");
        assert!(err.rule.contains("nodes"), "{err}");
        let fine = plugin_config(r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#)
            .expect("a plain object");
        assert_eq!(fine["properties"]["a"]["type"], "string");
    }

    /// What schemars derives for typical configuration types, made structural.
    #[test]
    fn schemars_output_for_rust_types_is_structural() {
        #[allow(dead_code)]
        #[derive(schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        /// A config.
        struct Config {
            /// How many.
            #[schemars(range(min = 1, max = 15))]
            replicas: i32,
            /// Optional words.
            words: Option<String>,
            backup: Option<Backup>,
            retention: Retention,
            maybe_retention: Option<Retention>,
            labels: std::collections::BTreeMap<String, String>,
            tags: std::collections::BTreeSet<String>,
            probe: Probe,
            tagged: Tagged,
            anything: serde_json::Value,
            port: u16,
        }
        #[allow(dead_code)]
        #[derive(schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct Backup {
            /// Cron.
            #[schemars(regex(pattern = r"^\S+$"))]
            schedule: String,
        }
        #[allow(dead_code)]
        #[derive(schemars::JsonSchema)]
        enum Retention {
            /// Keep.
            Retain,
            /// Delete.
            Delete,
        }
        #[allow(dead_code)]
        #[derive(schemars::JsonSchema)]
        #[serde(rename_all = "lowercase")]
        enum Probe {
            Http { path: String },
            Tcp(u16),
            None,
        }
        #[allow(dead_code)]
        #[derive(schemars::JsonSchema)]
        #[serde(tag = "kind")]
        enum Tagged {
            A { x: i32 },
            B,
        }
        let generated = schemars::SchemaGenerator::default().into_root_schema_for::<Config>();
        let raw = serde_json::to_value(&generated).expect("JSON");
        // A unit variant beside struct variants (externally tagged) is a string or an object:
        // no structural schema says that.
        let err = structural(&raw).expect_err("probe mixes a string and objects");
        assert_eq!(err.at, ".probe", "{err}");
        let mut raw = raw;
        raw["properties"]
            .as_object_mut()
            .expect("properties")
            .remove("probe");
        let out = structural(&raw).unwrap_or_else(|e| panic!("{raw:#}: {e}"));
        check_structural(&out).expect("structural");
        let p = &out["properties"];
        assert_eq!(p["replicas"]["minimum"], 1);
        assert_eq!(p["replicas"]["maximum"], 15);
        assert_eq!(p["replicas"]["description"], "How many.");
        assert_eq!(p["words"]["nullable"], true);
        assert_eq!(p["backup"]["nullable"], true);
        assert_eq!(p["backup"]["properties"]["schedule"]["pattern"], r"^\S+$");
        assert_eq!(p["retention"]["enum"], json!(["Retain", "Delete"]));
        assert_eq!(p["maybeRetention"]["nullable"], true);
        assert_eq!(p["maybeRetention"]["enum"], json!(["Retain", "Delete"]));
        assert_eq!(p["labels"]["additionalProperties"]["type"], "string");
        assert_eq!(p["tags"]["items"]["type"], "string");
        assert!(p["tags"].get("uniqueItems").is_none());
        assert_eq!(p["tagged"]["properties"]["kind"]["enum"], json!(["A", "B"]));
        assert_eq!(p["anything"]["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(p["port"]["maximum"], 65535);
        assert_eq!(p["port"]["minimum"], 0);
        assert_eq!(
            p["port"]["format"], "int64",
            "uint16 is not a format Kubernetes knows"
        );
        assert_eq!(p["replicas"]["format"], "int32");
        assert!(out.get("$defs").is_none() && out.get("$schema").is_none());
        assert!(out.get("title").is_none());
    }
}
